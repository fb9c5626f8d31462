/* Per-port state shared by ingress and egress (BMv2 lets both controls reach a top-level register). */
#ifndef PCN_STATE_P4
#define PCN_STATE_P4

/* Queue left behind by the last departure from each port: written by egress, read by ingress for the
 * burst digest (ingress cannot see the queue a packet is about to join). */
register<bit<32>>(MAX_PORTS) port_queue_left;

/* pcn-host: jobs whose next burst was announced with PCN-START and has not arrived yet, per egress
 * port, and when the last announcement came. An announcement holds for at most the mode's hold time,
 * so a burst that never comes cannot leave the port marking at K_pre. */
register<bit<16>>(MAX_PORTS) announced_jobs;
register<time_us_t>(MAX_PORTS) last_announcement_us;

/* pcn-host: announcements (PCN-START) waiting in each port's queue. BMv2 counts its queue in packets, so
 * a 115-byte announcement weighs as much against K_pre as a full-size packet; a port told to discount
 * them marks at the depth without them. Ingress counts one in, egress one out, each in an action of its
 * own (BMv2 runs an action under the locks of the registers it uses). A packet that leaves the queue
 * empty resets the count, unless an announcement came in after it: the reset is written in egress,
 * after announcements that arrived meanwhile were counted (measured: a reset by the announcement that
 * met an empty queue wiped the three behind it, and a test of the count failed 3 times in 14). */
register<bit<16>>(MAX_PORTS) queued_announcements;
register<time_us_t>(MAX_PORTS) announcement_in_us;   /* when the latest one came in */

/* The end of a burst: the DDL job whose data last went to each port, its G, and whether the silence after
 * it was reported. Background packets to the port carry the clock: the first one G after the job's last
 * data packet reports the end (a port with no other traffic reports none; where no queue stands, none
 * is needed). One job per port: with two on a port, the later one's end. */
register<bit<8>>(MAX_PORTS) active_job;
register<bit<32>>(MAX_PORTS) active_gap_us;
register<bit<1>>(MAX_PORTS) end_reported;

/* First served (ingress.p4's first_served): the DDL job whose burst towards each port started first and
 * is under way (its last data packet came less than its G ago), and that G. */
register<bit<8>>(MAX_PORTS) first_job;
register<bit<32>>(MAX_PORTS) first_gap_us;

#endif
