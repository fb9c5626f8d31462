// The measurement's switch (bench/priority_queues.py): forwards IPv4 to the port numbered by the
// destination's last octet (10.0.0.N on port N) and puts each packet in the priority queue its source
// is given in table `queue_of` (none: queue 0), so two senders into h1 can meet in two queues of port 1.
#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dst; bit<48> src; bit<16> type; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> tos; bit<16> len; bit<16> id; bit<3> flags; bit<13> frag;
    bit<8> ttl; bit<8> proto; bit<16> csum; bit<32> src; bit<32> dst;
}
struct headers_t { ethernet_t eth; ipv4_t ipv4; }
struct meta_t { }

parser P(packet_in pkt, out headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    state start { pkt.extract(h.eth); transition select(h.eth.type) { 0x0800: ipv4; default: accept; } }
    state ipv4 { pkt.extract(h.ipv4); transition accept; }
}
control VC(inout headers_t h, inout meta_t m) { apply { } }
control I(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    action queue(bit<3> priority) { sm.priority = priority; }
    table queue_of {
        key = { h.ipv4.src: exact; }
        actions = { queue; NoAction; }
        default_action = NoAction();
    }
    apply {
        if (h.ipv4.isValid()) {
            sm.egress_spec = (bit<9>) h.ipv4.dst[7:0];
            queue_of.apply();
        } else {
            mark_to_drop(sm);
        }
    }
}
control E(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout headers_t h, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t h) { apply { pkt.emit(h.eth); pkt.emit(h.ipv4); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
