/* Checksums and deparser. */
#ifndef PCN_DEPARSER_P4
#define PCN_DEPARSER_P4

control PcnVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

/* ECN marking and the TTL change the IPv4 header: its checksum is recomputed on the way out. */
control PcnComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(
            hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.src, hdr.ipv4.dst },
            hdr.ipv4.hdr_checksum,
            HashAlgorithm.csum16);
    }
}

control PcnDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.telemetry);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.l4);
        pkt.emit(hdr.tcp);
    }
}

#endif
