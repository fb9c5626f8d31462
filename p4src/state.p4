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

#endif
