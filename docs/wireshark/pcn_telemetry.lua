-- Wireshark / tshark dissector for PCN Lab's queue telemetry frames (ethertype 0x88B5).
--
-- The record is p4src/headers.p4's telemetry_h (44 bytes after the Ethernet header; BMv2 truncates each
-- clone to those 58 bytes); controller/telemetry.py decodes the same bytes with struct.
--
-- Install (Wireshark 3.x / 4.x, Lua built in):
--   mkdir -p ~/.local/lib/wireshark/plugins && cp docs/wireshark/pcn_telemetry.lua ~/.local/lib/wireshark/plugins/
-- or for one command:
--   tshark -X lua_script:docs/wireshark/pcn_telemetry.lua -r results/.../s1-eth5_out.pcap -Y pcn
-- Display filters: pcn, pcn.seq, pcn.switch_id, pcn.port, pcn.class, pcn.job, pcn.flags.marked, ...

local pcn = Proto("pcn", "PCN Lab queue telemetry")

local CLASSES = { [0] = "background", [1] = "ddl" }

local f = {
    seq            = ProtoField.uint32("pcn.seq", "Sequence number (per switch)", base.DEC),
    switch_id      = ProtoField.uint16("pcn.switch_id", "Switch id (sN)", base.DEC),
    port           = ProtoField.uint16("pcn.port", "Egress port", base.DEC),
    class          = ProtoField.uint8("pcn.class", "Traffic class", base.DEC, CLASSES),
    job            = ProtoField.uint8("pcn.job", "DDL job id (0: background)", base.DEC),
    flags          = ProtoField.uint8("pcn.flags", "Flags", base.HEX),
    marked         = ProtoField.bool("pcn.flags.marked", "CE-marked here", 8, nil, 0x01),
    dropped        = ProtoField.bool("pcn.flags.dropped", "Dropped by the program (early drop)", 8, nil, 0x02),
    burst_start    = ProtoField.bool("pcn.flags.burst_start", "First DDL packet of a burst on this port", 8, nil, 0x04),
    in_window      = ProtoField.bool("pcn.flags.in_window", "Pre-drain window / announcement active", 8, nil, 0x08),
    ect            = ProtoField.bool("pcn.flags.ect", "ECN-capable on arrival", 8, nil, 0x10),
    announce       = ProtoField.bool("pcn.flags.announce", "PCN-START announcement", 8, nil, 0x20),
    reserved       = ProtoField.uint8("pcn.reserved", "Reserved", base.HEX),
    ingress_us     = ProtoField.uint64("pcn.ingress_us", "Ingress time (us, switch clock)", base.DEC),
    egress_us      = ProtoField.uint64("pcn.egress_us", "Egress time (us, switch clock)", base.DEC),
    enq_qdepth     = ProtoField.uint32("pcn.enq_qdepth", "Queue met on arrival (packets)", base.DEC),
    deq_qdepth     = ProtoField.uint32("pcn.deq_qdepth", "Queue left on departure (packets)", base.DEC),
    queue_delay_us = ProtoField.uint32("pcn.queue_delay_us", "Queueing delay (us)", base.DEC),
    packet_length  = ProtoField.uint16("pcn.packet_length", "Packet length (bytes)", base.DEC),
    payload_bytes  = ProtoField.uint16("pcn.payload_bytes", "L4 payload (bytes; 0: pure ACK)", base.DEC),
    src_host       = ProtoField.uint16("pcn.src_host", "Source host (hN: low 16 bits of the IPv4 address)", base.DEC),
    dst_host       = ProtoField.uint16("pcn.dst_host", "Destination host (hN)", base.DEC),
}
pcn.fields = {
    f.seq, f.switch_id, f.port, f.class, f.job, f.flags, f.marked, f.dropped, f.burst_start, f.in_window,
    f.ect, f.announce, f.reserved, f.ingress_us, f.egress_us, f.enq_qdepth, f.deq_qdepth, f.queue_delay_us,
    f.packet_length, f.payload_bytes, f.src_host, f.dst_host,
}

local RECORD_BYTES = 44

function pcn.dissector(tvb, pinfo, tree)
    if tvb:len() < RECORD_BYTES then
        return 0
    end
    pinfo.cols.protocol = "PCN"
    local t = tree:add(pcn, tvb(0, RECORD_BYTES))
    -- (offset, length, field) in the order of telemetry_h
    local layout = {
        { 0, 4, f.seq }, { 4, 2, f.switch_id }, { 6, 2, f.port }, { 8, 1, f.class }, { 9, 1, f.job },
    }
    for _, item in ipairs(layout) do
        t:add(item[3], tvb(item[1], item[2]))
    end
    local flags = t:add(f.flags, tvb(10, 1))
    for _, bit in ipairs({ f.marked, f.dropped, f.burst_start, f.in_window, f.ect, f.announce }) do
        flags:add(bit, tvb(10, 1))
    end
    t:add(f.reserved, tvb(11, 1))
    -- 48-bit timestamps: read as unsigned 64-bit values of 6 bytes
    t:add(f.ingress_us, tvb(12, 6), tvb(12, 6):uint64())
    t:add(f.egress_us, tvb(18, 6), tvb(18, 6):uint64())
    layout = {
        { 24, 4, f.enq_qdepth }, { 28, 4, f.deq_qdepth }, { 32, 4, f.queue_delay_us }, { 36, 2, f.packet_length },
        { 38, 2, f.payload_bytes }, { 40, 2, f.src_host }, { 42, 2, f.dst_host },
    }
    for _, item in ipairs(layout) do
        t:add(item[3], tvb(item[1], item[2]))
    end
    local class = CLASSES[tvb(8, 1):uint()] or tostring(tvb(8, 1):uint())
    pinfo.cols.info = string.format("s%d port %d seq %d %s job %d queue %d -> %d, %d us, h%d -> h%d",
        tvb(4, 2):uint(), tvb(6, 2):uint(), tvb(0, 4):uint(), class, tvb(9, 1):uint(), tvb(24, 4):uint(),
        tvb(28, 4):uint(), tvb(32, 4):uint(), tvb(40, 2):uint(), tvb(42, 2):uint())
    return RECORD_BYTES
end

DissectorTable.get("ethertype"):add(0x88B5, pcn)
