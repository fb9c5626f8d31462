/* IPv4 forwarding: one LPM route per destination, installed by the controller from the topology. */
#ifndef PCN_FORWARDING_P4
#define PCN_FORWARDING_P4

control Forwarding(inout headers_t hdr, inout standard_metadata_t std) {
    action drop() {
        mark_to_drop(std);
    }

    /* Next hop: the egress port and the destination MAC of the host the packet is for. */
    action forward(port_t port, mac_t dst_mac) {
        std.egress_spec = port;
        hdr.ethernet.src = hdr.ethernet.dst;
        hdr.ethernet.dst = dst_mac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    table ipv4_routes {
        key = { hdr.ipv4.dst: lpm @name("ipv4_dst"); }
        actions = { forward; drop; }
        default_action = drop();
        size = 1024;
    }

    apply {
        if (hdr.ipv4.isValid() && hdr.ipv4.ttl > 1) {
            ipv4_routes.apply();
        } else {
            drop();
        }
    }
}

#endif
