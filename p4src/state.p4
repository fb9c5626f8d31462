/* Per-port state shared by ingress and egress (BMv2 lets both controls reach a top-level register). */
#ifndef PCN_STATE_P4
#define PCN_STATE_P4

/* Queue left behind by the last departure from each port: written by egress, read by ingress for the
 * burst digest (ingress cannot see the queue a packet is about to join). */
register<bit<32>>(MAX_PORTS) port_queue_left;

/* pcn-host: bursts announced with PCN-START and not yet arrived, per egress port. */
register<bit<16>>(MAX_PORTS) announced_bursts;

#endif
