/* Random loss of DDL data packets towards a port, at a rate the controller sets at run time (issue 24:
 * the LTP paper's lossy regime): 1 in a million per unit, a counter of what it lost. Applied in ingress
 * before the packet joins its egress queue, so a lost packet is neither queued nor counted as handed
 * to the queue (the full-queue drops, to_queue - tx - dropped, stay what they were). Only data packets
 * (payload at least the job's burst_min_payload, not a pcn-host announcement) are lost: pure ACKs,
 * small control messages and announcements pass. A port without an entry (the controller deletes it
 * at rate 0) costs one table miss per DDL data packet. */
#ifndef PCN_LOSS_P4
#define PCN_LOSS_P4

#define LOSS_SCALE 1000000   /* per_million: packets lost per million */

control GradientLoss(inout metadata_t meta, inout standard_metadata_t std) {
    counter(PORT_CLASS_SLOTS, CounterType.packets_and_bytes) lost_port_class; /* by egress port */

    bit<32> per_million = 0;

    action lose(bit<32> rate_per_million) {
        per_million = rate_per_million;
    }

    table gradient_loss {
        key = { std.egress_spec: exact @name("port"); }
        actions = { lose; NoAction; }
        default_action = NoAction();
        size = MAX_PORTS;
    }

    apply {
        if (gradient_loss.apply().hit) {
            bit<32> draw;
            random(draw, 0, LOSS_SCALE - 1);
            if (draw < per_million) {
                /* counted first: mark_to_drop sets egress_spec to the drop port */
                lost_port_class.count(PORT_CLASS_SLOT(std.egress_spec, meta.traffic_class));
                mark_to_drop(std);
                meta.lost = 1;
            }
        }
    }
}

#endif
