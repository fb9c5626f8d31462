/* Queue telemetry, a concern of its own (as ONOS fabric.p4 keeps INT apart): 1 in N packets of each port
 * sampled into meta.tel and cloned to the collector's session (TelemetrySample, at the end of egress),
 * and the clone turned into the 44-byte record (TelemetryRecord, instead of the rest of egress).
 * The record's layout is headers.p4's telemetry_h; `make p4` hands it to the Python side (facts.py). */
#ifndef PCN_TELEMETRY_P4
#define PCN_TELEMETRY_P4

#include "payload.p4"

control TelemetryRecord(inout headers_t hdr, in metadata_t meta) {
    apply {
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
    }
}

/* A record of 1 in meta.telemetry_every packets per port (0: none), with what egress decided (flags). */
control TelemetrySample(in headers_t hdr, inout metadata_t meta, in standard_metadata_t std, in bit<8> flags) {
    register<bit<32>>(MAX_PORTS) telemetry_countdown;
    register<bit<32>>(1) telemetry_seq;

    PayloadLength() payload;

    apply {
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
