/* Egress: the port's mode (drop-tail, ECN at K, PCN pre-drain window, pcn-host announcements), which
 * also carries the switch's telemetry settings (one table for both: each table costs BMv2 per packet),
 * the per-port/class counters of what left, and queue telemetry as truncated clones to the collector. */
#ifndef PCN_EGRESS_P4
#define PCN_EGRESS_P4

#include "payload.p4"

#define PKT_INSTANCE_NORMAL 0
#define PKT_INSTANCE_EGRESS_CLONE 2

control PcnEgress(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t std) {
    register<bit<32>>(MAX_PORTS) telemetry_countdown;
    register<bit<32>>(1) telemetry_seq;

    counter(PORT_CLASS_SLOTS, CounterType.packets_and_bytes) tx_port_class;
    counter(PORT_CLASS_SLOTS, CounterType.packets_and_bytes) marked_port_class;
    counter(PORT_CLASS_SLOTS, CounterType.packets_and_bytes) dropped_port_class;

    PayloadLength() payload;

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

    action mode_ecn(bit<16> switch_id, bit<32> telemetry_every, bit<32> telemetry_session, qdepth_t k) {
        telemetry_config(switch_id, telemetry_every, telemetry_session);
        meta.marking = 1;
        meta.k = k;
        meta.k_pre = k;
    }

    /* Ours: K_pre applies to background traffic while a pre-drain window armed by the controller is open. */
    action mode_pcn(bit<16> switch_id, bit<32> telemetry_every, bit<32> telemetry_session, qdepth_t k,
                    qdepth_t k_pre, bit<1> drop_non_ect) {
        telemetry_config(switch_id, telemetry_every, telemetry_session);
        meta.marking = 1;
        meta.k = k;
        meta.k_pre = k_pre;
        meta.drop_non_ect = drop_non_ect;
        meta.use_windows = 1;
    }

    /* The paper's: K_pre applies to background traffic leaving the port while a job's announced burst
     * is pending there, for at most hold_us after the last announcement. Judged when the packet leaves
     * (egress time): a packet that queued before the announcement still carries the signal, and the
     * burst's arrival ends it for every packet still queued. */
    action mode_pcn_host(bit<16> switch_id, bit<32> telemetry_every, bit<32> telemetry_session, qdepth_t k,
                         qdepth_t k_pre, bit<32> hold_us) {
        telemetry_config(switch_id, telemetry_every, telemetry_session);
        meta.marking = 1;
        meta.k = k;
        meta.k_pre = k_pre;
        bit<16> jobs;
        announced_jobs.read(jobs, (bit<32>)std.egress_port);
        time_us_t last;
        last_announcement_us.read(last, (bit<32>)std.egress_port);
        meta.window_open = (bit<1>)(jobs > 0 && std.egress_global_timestamp - last < (time_us_t)hold_us);
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
            /* A telemetry clone: replace the packet by the record of the original. */
            hdr.telemetry.setValid();
            hdr.telemetry.seq = meta.tel.seq;
            hdr.telemetry.switch_id = meta.switch_id;
            hdr.telemetry.egress_port = meta.tel.egress_port;
            hdr.telemetry.traffic_class = meta.tel.traffic_class;
            hdr.telemetry.job = meta.tel.job;
            hdr.telemetry.flags = meta.tel.flags;
            hdr.telemetry.ingress_ts = meta.tel.ingress_ts;
            hdr.telemetry.egress_ts = meta.tel.egress_ts;
            hdr.telemetry.enq_qdepth = meta.tel.enq_qdepth;
            hdr.telemetry.deq_qdepth = meta.tel.deq_qdepth;
            hdr.telemetry.queue_delay = meta.tel.queue_delay;
            hdr.telemetry.packet_length = meta.tel.packet_length;
            hdr.telemetry.payload_length = meta.tel.payload_length;
            hdr.telemetry.src_host = meta.tel.src_host;
            hdr.telemetry.dst_host = meta.tel.dst_host;
            hdr.ethernet.dst = 0xffffffffffff;
            hdr.ethernet.ether_type = ETHERTYPE_PCN_TELEMETRY;
            hdr.ipv4.setInvalid();
            hdr.l4.setInvalid();
            hdr.tcp.setInvalid();
            truncate(TELEMETRY_FRAME_BYTES);
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
        bit<32> slot = (bit<32>)std.egress_port * 2 + (bit<32>)meta.traffic_class;
        if (meta.marking == 1) {
            qdepth_t threshold = meta.k;
            bool low = meta.window_open == 1 && meta.traffic_class == CLASS_BACKGROUND;
            if (low) {
                threshold = meta.k_pre;
                flags = flags | TEL_IN_WINDOW;
            }
            if (std.enq_qdepth >= threshold) {
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

        /* Telemetry: a record of 1 in N packets per port. */
        if (meta.telemetry_every != 0) {
            bit<32> countdown;
            telemetry_countdown.read(countdown, (bit<32>)std.egress_port);
            if (countdown <= 1) {
                countdown = meta.telemetry_every;
                bit<32> seq;
                telemetry_seq.read(seq, 0);
                telemetry_seq.write(0, seq + 1);
                meta.tel.seq = seq;
                meta.tel.egress_port = (bit<16>)std.egress_port;
                meta.tel.traffic_class = meta.traffic_class;
                meta.tel.job = meta.job;
                meta.tel.flags = flags;
                meta.tel.ingress_ts = std.ingress_global_timestamp;
                meta.tel.egress_ts = std.egress_global_timestamp;
                meta.tel.enq_qdepth = (bit<32>)std.enq_qdepth;
                meta.tel.deq_qdepth = (bit<32>)std.deq_qdepth;
                meta.tel.queue_delay = std.deq_timedelta;
                meta.tel.packet_length = (bit<16>)std.packet_length;
                if (meta.traffic_class != CLASS_DDL) {  /* ingress measured DDL packets' already */
                    payload.apply(hdr, meta.payload_length);
                }
                meta.tel.payload_length = meta.payload_length;
                meta.tel.src_host = hdr.ipv4.src[15:0];
                meta.tel.dst_host = hdr.ipv4.dst[15:0];
                clone_preserving_field_list(CloneType.E2E, meta.telemetry_session, 1);
            } else {
                countdown = countdown - 1;
            }
            telemetry_countdown.write((bit<32>)std.egress_port, countdown);
        }
    }
}

#endif
