/* Egress: nothing yet beyond what v1model does. */
#ifndef PCN_EGRESS_P4
#define PCN_EGRESS_P4

control PcnEgress(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t std) {
    apply { }
}

#endif
