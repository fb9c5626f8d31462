/* Egress: the port's mode (drop-tail, ECN at K, PCN pre-drain window, pcn-host announcements, first
 * served), which also carries the switch's telemetry settings (one table for both: each table costs BMv2
 * per packet), and the per-port/class counters of what left; queue telemetry (telemetry.p4) samples what
 * it decided. */
#ifndef PCN_EGRESS_P4
#define PCN_EGRESS_P4

#include "telemetry.p4"

#define PKT_INSTANCE_NORMAL 0
#define PKT_INSTANCE_EGRESS_CLONE 2

control PcnEgress(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t std) {
    counter(PORT_CLASS_SLOTS, CounterType.packets_and_bytes) tx_port_class;
    counter(PORT_CLASS_SLOTS, CounterType.packets_and_bytes) marked_port_class;
    counter(PORT_CLASS_SLOTS, CounterType.packets_and_bytes) dropped_port_class;

    TelemetrySample() sample;
    TelemetryRecord() record;

    /* Every mode's first three parameters: the switch's id and its telemetry (clone 1 in N packets of
     * this port to the collector's clone session; N = 0: none). */
    action telemetry_config(bit<16> switch_id, bit<32> telemetry_every, bit<32> telemetry_session) {
        meta.switch_id = switch_id;
        meta.telemetry_every = telemetry_every;
        meta.telemetry_session = telemetry_session;
    }

    action mode_droptail(bit<16> switch_id, bit<32> telemetry_every, bit<32> telemetry_session) {
        telemetry_config(switch_id, telemetry_every, telemetry_session);
        meta.marking = 0;
    }

    /* Every marking mode's last parameter: k_behind, the threshold for a DDL job's packets while another
     * job's burst that started first is under way at the port (ingress.p4's first_served; k: off). */
    action mode_ecn(bit<16> switch_id, bit<32> telemetry_every, bit<32> telemetry_session, qdepth_t k,
                    qdepth_t k_behind) {
        telemetry_config(switch_id, telemetry_every, telemetry_session);
        meta.marking = 1;
        meta.k = k;
        meta.k_pre = k;
        meta.k_behind = k_behind;
    }

    /* Ours: K_pre applies to background traffic while a pre-drain window armed by the controller is open. */
    action mode_pcn(bit<16> switch_id, bit<32> telemetry_every, bit<32> telemetry_session, qdepth_t k,
                    qdepth_t k_pre, bit<1> drop_non_ect, qdepth_t k_behind) {
        telemetry_config(switch_id, telemetry_every, telemetry_session);
        meta.marking = 1;
        meta.k = k;
        meta.k_pre = k_pre;
        meta.k_behind = k_behind;
        meta.drop_non_ect = drop_non_ect;
        meta.use_windows = 1;
    }

    /* The paper's: K_pre applies to background traffic leaving the port while a job's announced burst
     * is pending there, for at most hold_us after the last announcement. Judged when the packet leaves
     * (egress time): a packet that queued before the announcement still carries the signal, and the
     * burst's arrival ends it for every packet still queued. */
    action mode_pcn_host(bit<16> switch_id, bit<32> telemetry_every, bit<32> telemetry_session, qdepth_t k,
                         qdepth_t k_pre, bit<32> hold_us, bit<1> discount_announcements, qdepth_t k_behind) {
        telemetry_config(switch_id, telemetry_every, telemetry_session);
        meta.marking = 1;
        meta.k = k;
        meta.k_pre = k_pre;
        meta.k_behind = k_behind;
        meta.discount_announcements = discount_announcements;
        bit<16> jobs;
        announced_jobs.read(jobs, (bit<32>)std.egress_port);
        time_us_t last;
        last_announcement_us.read(last, (bit<32>)std.egress_port);
        meta.window_open = (bit<1>)(jobs > 0 && std.egress_global_timestamp - last < (time_us_t)hold_us);
    }

    /* pcn-host: the announcements queued at this port after this packet left (an action: atomic against
     * ingress's count in, state.p4): one fewer if it is one, none if it left the queue empty and no
     * announcement came in after it did. */
    action announcements_left(bit<1> emptied) {
        bit<32> port = (bit<32>)std.egress_port;
        bit<16> queued;
        queued_announcements.read(queued, port);
        time_us_t latest;
        announcement_in_us.read(latest, port);
        bit<16> leaving = queued > 0 ? (bit<16>)meta.announcement : 16w0;
        bool none = emptied == 1 && latest < std.ingress_global_timestamp;
        queued_announcements.write(port, none ? 16w0 : queued - leaving);
    }

    table port_mode {
        key = { std.egress_port: exact @name("port"); }
        actions = { mode_droptail; mode_ecn; mode_pcn; mode_pcn_host; }
        default_action = mode_droptail(0, 0, 0);  /* the controller sets the switch's own */
        size = MAX_PORTS;
    }

    action window_open() {
        meta.window_open = 1;
    }

    /* Pre-drain windows [start, end) in this switch's clock, written ahead of time by the controller:
     * the switch, not the P4Runtime write latency, decides when a window opens and closes. A packet is
     * in a window when it leaves the queue inside it: the marks go out at once, not a queueing delay
     * later (a standing queue of 40 packets at 20 Mbit/s holds a packet 24 ms). */
    table predrain_windows {
        key = {
            std.egress_port:             exact @name("port");
            std.egress_global_timestamp: range @name("now_us");
        }
        actions = { window_open; NoAction; }
        default_action = NoAction();
        size = 256;
    }

    apply {
        if (std.instance_type == PKT_INSTANCE_EGRESS_CLONE) {
            record.apply(hdr, meta);   /* a telemetry clone: the record of the original instead */
            return;
        }
        if (!hdr.ipv4.isValid() || std.egress_port >= MAX_PORTS) {
            return;
        }
        bit<8> flags = 0;
        if (hdr.ipv4.ecn != ECN_NOT_ECT) {
            flags = flags | TEL_ECT;
        }
        if (meta.burst_start == 1) {
            flags = flags | TEL_BURST_START;
        }
        if (meta.announcement == 1) {
            flags = flags | TEL_ANNOUNCE;
        }
        port_mode.apply();
        if (meta.use_windows == 1 && meta.traffic_class == CLASS_BACKGROUND && meta.k_pre < meta.k) {
            predrain_windows.apply();
        }
        bit<32> slot = PORT_CLASS_SLOT(std.egress_port, meta.traffic_class);
        if (meta.marking == 1) {
            qdepth_t threshold = meta.k;
            bool low = meta.window_open == 1 && meta.traffic_class == CLASS_BACKGROUND;
            if (low) {
                threshold = meta.k_pre;
                flags = flags | TEL_IN_WINDOW;
            }
            if (meta.behind == 1 && meta.k_behind < meta.k) {   /* first served: this job waits its turn */
                threshold = meta.k_behind;
                flags = flags | TEL_BEHIND;
            }
            qdepth_t depth = std.enq_qdepth;
            if (meta.discount_announcements == 1) {
                qdepth_t ahead = (qdepth_t)meta.announcements_ahead;
                depth = ahead < depth ? depth - ahead : 0;
            }
            if (depth >= threshold) {
                if (hdr.ipv4.ecn != ECN_NOT_ECT) {
                    hdr.ipv4.ecn = ECN_CE;
                    flags = flags | TEL_MARKED;
                    marked_port_class.count(slot);
                } else if (low && meta.drop_non_ect == 1) {
                    mark_to_drop(std);
                    flags = flags | TEL_DROPPED;
                    dropped_port_class.count(slot);
                }
            }
        }
        if ((flags & TEL_DROPPED) == 0) {
            tx_port_class.count(slot);
        }
        port_queue_left.write((bit<32>)std.egress_port, (bit<32>)std.deq_qdepth);
        if (meta.announcement == 1 || std.deq_qdepth == 0) {
            announcements_left((bit<1>)(std.deq_qdepth == 0));
        }

        sample.apply(hdr, meta, std, flags);
    }
}

#endif
