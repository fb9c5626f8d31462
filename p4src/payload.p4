/* The L4 payload of an IPv4 packet: what is left after its own and the TCP (or UDP) header. 0 for a
 * pure TCP ACK. Computed only where it is needed (DDL packets in ingress, sampled ones in egress). */
#ifndef PCN_PAYLOAD_P4
#define PCN_PAYLOAD_P4

control PayloadLength(in headers_t hdr, out bit<16> length) {
    apply {
        bit<16> headers = ((bit<16>)hdr.ipv4.ihl) << 2;
        if (hdr.tcp.isValid()) {
            headers = headers + (((bit<16>)hdr.tcp.data_offset) << 2);
        } else if (hdr.l4.isValid()) {
            headers = headers + 8;
        }
        length = 0;
        if (hdr.ipv4.total_len > headers) {
            length = hdr.ipv4.total_len - headers;
        }
    }
}

#endif
