/* Parses Ethernet and IPv4; everything else passes through the pipeline unparsed. */
#ifndef PCN_PARSER_P4
#define PCN_PARSER_P4

parser PcnParser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t std) {
    state start {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        transition accept;
    }
}

#endif
