/* Packet headers and the metadata the PCN Lab pipeline carries between its controls. */
#ifndef PCN_HEADERS_P4
#define PCN_HEADERS_P4

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_t;

const bit<16> ETHERTYPE_IPV4 = 0x0800;

header ethernet_h {
    mac_t   dst;
    mac_t   src;
    bit<16> ether_type;
}

header ipv4_h {
    bit<4>  version;
    bit<4>  ihl;
    bit<6>  dscp;
    bit<2>  ecn;
    bit<16> total_len;
    bit<16> identification;
    bit<3>  flags;
    bit<13> frag_offset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> hdr_checksum;
    ipv4_t  src;
    ipv4_t  dst;
}

struct headers_t {
    ethernet_h ethernet;
    ipv4_h     ipv4;
}

struct metadata_t {
    bit<1> unused;
}

#endif
