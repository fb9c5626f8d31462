/* Ingress: forwarding, traffic classes, random loss of DDL data packets (loss.p4), burst-start detection
 * from data packets and digests, pcn-host announcements, which job's burst a port serves first, and the
 * per-port/class counter of packets handed to each egress queue. Kept to what every packet needs: each
 * table and primitive costs BMv2 per packet (bench/bench_dataplane.py). */
#ifndef PCN_INGRESS_P4
#define PCN_INGRESS_P4

#include "forwarding.p4"
#include "payload.p4"
#include "loss.p4"

control PcnIngress(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t std) {
    /* Last DDL data packet seen per (egress port, job), for burst-start detection. */
    register<time_us_t>(MAX_PORTS * MAX_JOBS) last_ddl_us;
    /* pcn-host: 1 while (egress port, job) has an announced burst that has not arrived. */
    register<bit<1>>(MAX_PORTS * MAX_JOBS) announced;

    counter(PORT_CLASS_SLOTS, CounterType.packets_and_bytes) to_queue_port_class; /* by egress port */

    Forwarding() forwarding;
    PayloadLength() payload;
    GradientLoss() loss;

    /* A DDL job's packet, with how its bursts are told apart: G and the smallest payload that counts. */
    action set_ddl(bit<8> job, bit<32> burst_gap_us, bit<16> burst_min_payload) {
        meta.traffic_class = CLASS_DDL;
        meta.job = job;
        meta.burst_gap_us = burst_gap_us;
        meta.burst_min_payload = burst_min_payload;
    }

    action set_background() {
        meta.traffic_class = CLASS_BACKGROUND;
        meta.job = 0;
    }

    /* Which flows belong to which DDL job: every ordered pair of a job's hosts, an exact match (a hash
     * lookup in BMv2, whatever the number of pairs) ... */
    table ddl_pairs {
        key = {
            hdr.ipv4.src: exact @name("src");
            hdr.ipv4.dst: exact @name("dst");
        }
        actions = { set_ddl; NoAction; }
        default_action = NoAction();
        size = 1024;
    }

    /* ... and classes by prefix, protocol or port range (searched in order: empty in experiments). */
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

    /* pcn-host: the DSCP code point with which hosts announce a burst (PCN-START). */
    table pcn_start_codepoint {
        key = { hdr.ipv4.dscp: exact @name("dscp"); }
        actions = { NoAction; }
        default_action = NoAction();
        size = 4;
    }

    /* pcn-host: one more announcement queued at `port`. In an action, as BMv2 holds the locks of the
     * registers an action uses while it runs: egress counts them out concurrently, and a read and a
     * write apart lost updates (a test of the count failed once in six suites). */
    action announcement_in(bit<32> port) {
        bit<16> queued;
        queued_announcements.read(queued, port);
        queued_announcements.write(port, queued + 1);
        announcement_in_us.write(port, std.ingress_global_timestamp);
    }

    /* First served: the DDL job whose burst towards `port` started first and is under way (its last data
     * packet came less than its G ago) keeps the port; a data packet of another job meanwhile is behind it,
     * and egress marks it at the mode's k_behind, so its senders back off until that burst is over. The
     * in-network alternative to time shifts (issue 47): BMv2's priority queues cannot serve it, as each has
     * a rate limiter of its own and the port none (bench/priority_queues.py). */
    action first_served(bit<32> port, time_us_t now) {
        bit<8> first;
        first_job.read(first, port);
        time_us_t last;
        last_ddl_us.read(last, port * MAX_JOBS + (bit<32>)first);
        bit<32> gap;
        first_gap_us.read(gap, port);
        bool under_way = first != 0 && first != meta.job && now - last <= (time_us_t)gap;
        meta.behind = (bit<1>)under_way;
        first_job.write(port, under_way ? first : meta.job);
        first_gap_us.write(port, under_way ? gap : meta.burst_gap_us);
    }

    apply {
        forwarding.apply(hdr, std);
        if (!hdr.ipv4.isValid() || std.egress_spec >= MAX_PORTS) {
            return;  /* dropped, or not ours to measure */
        }
        if (!ddl_pairs.apply().hit) {
            traffic_class.apply();
        }
        if (meta.traffic_class == CLASS_DDL) {
            payload.apply(hdr, meta.payload_length);
            if (pcn_start_codepoint.apply().hit) {
                meta.announcement = 1;   /* a control message: never lost at random */
            } else if (meta.payload_length >= meta.burst_min_payload) {
                loss.apply(meta, std);   /* a data packet may be lost at random before its queue */
                if (meta.lost == 1) {
                    return;
                }
            }
        }
        to_queue_port_class.count(PORT_CLASS_SLOT(std.egress_spec, meta.traffic_class));
        queued_announcements.read(meta.announcements_ahead, (bit<32>)std.egress_spec);

        /* One digest call for both kinds: BMv2 makes a learn list per call site, and P4Runtime configures
         * only the first (a second one kept BMv2's default and sent its digests in batches once a second). */
        bool report = false;
        bit<8> report_job = meta.job;
        time_us_t report_ts = 0;
        time_us_t report_idle = 0;
        bit<8> report_kind = BURST_START;
        bit<32> queue;

        if (meta.traffic_class == CLASS_DDL) {
            bit<32> port = (bit<32>)std.egress_spec;
            bit<32> idx = port * MAX_JOBS + (bit<32>)meta.job;
            time_us_t now = std.ingress_global_timestamp;
            time_us_t last;
            last_ddl_us.read(last, idx);
            bool idle = last == 0 || now - last > (time_us_t)meta.burst_gap_us;
            bit<1> pending;
            announced.read(pending, idx);
            bit<16> jobs;
            announced_jobs.read(jobs, port);
            if (meta.announcement == 1) {
                announcement_in(port);
                /* An announcement is not part of the burst it announces; one announcing a burst that
                 * is already under way (a late worker's) announces nothing. */
                if (idle) {
                    if (pending == 0) {
                        announced.write(idx, 1);
                        announced_jobs.write(port, jobs + 1);
                    }
                    last_announcement_us.write(port, now);
                }
            } else if (meta.payload_length >= meta.burst_min_payload) {
                /* A data packet: pure ACKs and small control messages never start a burst. */
                if (idle) {
                    meta.burst_start = 1;
                    report = true;
                    report_ts = now;
                    report_idle = now - last;
                    if (pending == 1) {  /* pcn-host: the announced burst has arrived */
                        announced.write(idx, 0);
                        announced_jobs.write(port, jobs - 1);
                    }
                }
                first_served(port, now);
                last_ddl_us.write(idx, now);
                active_job.write(port, meta.job);
                active_gap_us.write(port, meta.burst_gap_us);
                end_reported.write(port, 0);
            }
        } else {
            bit<32> port = (bit<32>)std.egress_spec;
            bit<1> reported;
            end_reported.read(reported, port);
            if (reported == 0) {
                bit<8> job;
                active_job.read(job, port);
                time_us_t last;
                last_ddl_us.read(last, port * MAX_JOBS + (bit<32>)job);
                bit<32> gap;
                active_gap_us.read(gap, port);
                time_us_t now = std.ingress_global_timestamp;
                if (job != 0 && last != 0 && now - last > (time_us_t)gap) {
                    report = true;
                    report_job = job;
                    report_ts = last;
                    report_idle = now - last;
                    report_kind = BURST_END;
                    end_reported.write(port, 1);
                }
            }
        }
        if (report) {
            port_queue_left.read(queue, (bit<32>)std.egress_spec);
            digest<burst_digest_t>(1, {(bit<16>)std.egress_spec, report_job, report_ts, queue, report_idle,
                                       report_kind});
        }
    }
}

#endif
