/* Ingress: configuration, forwarding, traffic classes, burst-start detection and digests, pcn-host
 * announcements, and the per-port/class counters of packets handed to each egress queue. */
#ifndef PCN_INGRESS_P4
#define PCN_INGRESS_P4

#include "forwarding.p4"

control PcnIngress(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t std) {
    /* Last DDL packet seen per (egress port, job), for burst-start detection. */
    register<time_us_t>(MAX_PORTS * MAX_JOBS) last_ddl_us;

    counter(PORT_CLASS_SLOTS, CounterType.packets_and_bytes) rx_port_class;      /* by ingress port */
    counter(PORT_CLASS_SLOTS, CounterType.packets_and_bytes) to_queue_port_class; /* by egress port */

    Forwarding() forwarding;

    action set_switch_config(bit<16> switch_id, bit<32> burst_gap_us, bit<32> telemetry_every,
                             bit<32> telemetry_session) {
        meta.switch_id = switch_id;
        meta.burst_gap_us = burst_gap_us;
        meta.telemetry_every = telemetry_every;
        meta.telemetry_session = telemetry_session;
    }

    /* No key: the controller sets the default action once per switch. */
    table switch_config {
        actions = { set_switch_config; }
        default_action = set_switch_config(0, 1000, 0, 0);
    }

    action set_ddl(bit<8> job) {
        meta.traffic_class = CLASS_DDL;
        meta.job = job;
    }

    action set_background() {
        meta.traffic_class = CLASS_BACKGROUND;
        meta.job = 0;
    }

    /* Which flows belong to which DDL job: filled from the experiment's job definitions. */
    table traffic_class {
        key = {
            hdr.ipv4.src:      ternary @name("src");
            hdr.ipv4.dst:      ternary @name("dst");
            hdr.ipv4.protocol: ternary @name("proto");
            hdr.l4.src_port:   range   @name("sport");
            hdr.l4.dst_port:   range   @name("dport");
        }
        actions = { set_ddl; set_background; }
        default_action = set_background();
        size = 256;
    }

    action count_announcement() {
        bit<16> pending;
        announced_bursts.read(pending, (bit<32>)std.egress_spec);
        announced_bursts.write((bit<32>)std.egress_spec, pending + 1);
    }

    /* pcn-host: the DSCP code point with which hosts announce a burst (PCN-START). */
    table pcn_start_codepoint {
        key = { hdr.ipv4.dscp: exact @name("dscp"); }
        actions = { count_announcement; NoAction; }
        default_action = NoAction();
        size = 4;
    }

    apply {
        switch_config.apply();
        forwarding.apply(hdr, std);
        if (!hdr.ipv4.isValid() || std.egress_spec >= MAX_PORTS) {
            return;  /* dropped, or not ours to measure */
        }
        traffic_class.apply();
        bit<32> slot_in = (bit<32>)std.ingress_port * 2 + (bit<32>)meta.traffic_class;
        bit<32> slot_out = (bit<32>)std.egress_spec * 2 + (bit<32>)meta.traffic_class;
        rx_port_class.count(slot_in);
        to_queue_port_class.count(slot_out);
        /* An announcement is not part of the burst it announces. */
        bool announcement = pcn_start_codepoint.apply().hit;

        if (meta.traffic_class == CLASS_DDL && !announcement) {
            bit<32> idx = (bit<32>)std.egress_spec * MAX_JOBS + (bit<32>)meta.job;
            time_us_t last;
            last_ddl_us.read(last, idx);
            time_us_t now = std.ingress_global_timestamp;
            if (last == 0 || now - last > (time_us_t)meta.burst_gap_us) {
                meta.burst_start = 1;
                bit<32> queue;
                port_queue_left.read(queue, (bit<32>)std.egress_spec);
                digest<burst_digest_t>(1, {meta.switch_id, (bit<16>)std.egress_spec, meta.job, now, queue});
                /* pcn-host: the announced burst has arrived. */
                bit<16> pending;
                announced_bursts.read(pending, (bit<32>)std.egress_spec);
                if (pending > 0) {
                    announced_bursts.write((bit<32>)std.egress_spec, pending - 1);
                }
            }
            last_ddl_us.write(idx, now);
        }
    }
}

#endif
