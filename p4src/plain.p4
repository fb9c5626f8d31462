/* The benchmark's baseline: the same parser and IPv4 forwarding as pcn.p4, and nothing else. */
#include <core.p4>
#include <v1model.p4>

#include "headers.p4"
#include "parser.p4"
#include "forwarding.p4"
#include "deparser.p4"

control PlainIngress(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t std) {
    Forwarding() forwarding;
    apply { forwarding.apply(hdr, std); }
}

control PlainEgress(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t std) {
    apply { }
}

V1Switch(PcnParser(), PcnVerifyChecksum(), PlainIngress(), PlainEgress(),
         PcnComputeChecksum(), PcnDeparser()) main;
