/* Packet headers, the telemetry record, the burst digest, and the metadata carried between controls. */
#ifndef PCN_HEADERS_P4
#define PCN_HEADERS_P4

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_t;
typedef bit<48> time_us_t;   /* BMv2 timestamps: microseconds since the switch started */
typedef bit<19> qdepth_t;    /* BMv2 queue depths: packets */

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<16> ETHERTYPE_PCN_TELEMETRY = 0x88B5;  /* IEEE local experimental */
const bit<8>  PROTO_TCP = 6;
const bit<8>  PROTO_UDP = 17;

const bit<8> CLASS_BACKGROUND = 0;
const bit<8> CLASS_DDL = 1;

const bit<2> ECN_NOT_ECT = 0;
const bit<2> ECN_CE = 3;

/* Per-port state lives in registers indexed by port, per-(port, job) state by port * MAX_JOBS + job. */
#define MAX_PORTS 64
#define MAX_JOBS 16
#define CLASSES 2             /* CLASS_BACKGROUND and CLASS_DDL */
/* The per-(port, class) counters' slots, and a packet's slot in them (the controller reads it back with
   divmod(index, CLASSES)). */
#define PORT_CLASS_SLOTS (MAX_PORTS * CLASSES)
#define PORT_CLASS_SLOT(port, cls) ((bit<32>)(port) * CLASSES + (bit<32>)(cls))

/* Flags in a telemetry record. */
const bit<8> TEL_MARKED      = 0x01;  /* this packet was CE-marked here */
const bit<8> TEL_DROPPED     = 0x02;  /* dropped by the program (PCN early drop) */
const bit<8> TEL_BURST_START = 0x04;  /* first DDL packet of a burst on this port */
const bit<8> TEL_IN_WINDOW   = 0x08;  /* a pre-drain window (pcn) or announcement (pcn-host) was active */
const bit<8> TEL_ECT         = 0x10;  /* the packet was ECN-capable on arrival */
const bit<8> TEL_ANNOUNCE    = 0x20;  /* a PCN-START announcement (pcn-host), not part of any burst */
const bit<8> TEL_BEHIND      = 0x40;  /* a DDL packet behind another job's burst that started first (k_behind) */

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

/* The first four bytes of TCP and UDP: all that classification needs. */
header l4_ports_h {
    bit<16> src_port;
    bit<16> dst_port;
}

/* The rest of a TCP header without options: its data offset tells the payload from the header. */
header tcp_rest_h {
    bit<32> seq_no;
    bit<32> ack_no;
    bit<4>  data_offset;   /* 32-bit words */
    bit<4>  reserved;
    bit<8>  flags;
    bit<16> window;
    bit<16> checksum;
    bit<16> urgent_ptr;
}

/* One queue telemetry record (44 bytes), sent as a truncated egress clone to the collector port. */
header telemetry_h {
    bit<32> seq;           /* per switch; gaps are records lost on the way to the collector */
    bit<16> switch_id;
    bit<16> egress_port;
    bit<8>  traffic_class;
    bit<8>  job;
    bit<8>  flags;
    bit<8>  reserved;
    bit<48> ingress_ts;    /* us */
    bit<48> egress_ts;     /* us, when the packet left the queue */
    bit<32> enq_qdepth;    /* packets in the queue when it arrived */
    bit<32> deq_qdepth;    /* packets left behind when it departed */
    bit<32> queue_delay;   /* us spent in the queue */
    bit<16> packet_length;
    bit<16> payload_length; /* L4 payload bytes: 0 for a pure ACK */
    bit<16> src_host;      /* low 16 bits of the IPv4 source: host hN is 10.0.0.0/16 + N */
    bit<16> dst_host;      /* low 16 bits of the IPv4 destination */
}
#define TELEMETRY_FRAME_BYTES 58  /* Ethernet (14) + record (44): what a clone is truncated to */

/* Digest to the controller: a DDL burst started on a port (the paper's "start queue length"), or one
 * ended there. The switch it came from is the P4Runtime stream it arrives on. */
const bit<8> BURST_START = 0;
const bit<8> BURST_END = 1;
struct burst_digest_t {
    bit<16>   port;
    bit<8>    job;
    time_us_t ts;          /* start: its first data packet; end: the last one before a silence of G */
    bit<32>   queue;       /* packets left behind by the last departure from that port's queue */
    time_us_t idle;        /* start: the job's silence towards that port before this packet (> G), the
                            * gap the controller learns iteration gaps from (controller/segments.py);
                            * end: how long after the burst's last packet the switch saw the silence */
    bit<8>    kind;        /* BURST_START or BURST_END */
}

struct headers_t {
    ethernet_h  ethernet;
    telemetry_h telemetry;
    ipv4_h      ipv4;
    l4_ports_h  l4;
    tcp_rest_h  tcp;
}

/* Copied into the telemetry clone (clone_preserving_field_list index 1). */
struct telemetry_meta_t {
    @field_list(1) bit<32> seq;
    @field_list(1) bit<16> egress_port;
    @field_list(1) bit<8>  traffic_class;
    @field_list(1) bit<8>  job;
    @field_list(1) bit<8>  flags;
    @field_list(1) bit<48> ingress_ts;
    @field_list(1) bit<48> egress_ts;
    @field_list(1) bit<32> enq_qdepth;
    @field_list(1) bit<32> deq_qdepth;
    @field_list(1) bit<32> queue_delay;
    @field_list(1) bit<16> packet_length;
    @field_list(1) bit<16> payload_length;
    @field_list(1) bit<16> src_host;
    @field_list(1) bit<16> dst_host;
}

struct metadata_t {
    /* Set in egress by the port's mode (port_mode): the switch's telemetry settings. */
    @field_list(1) bit<16> switch_id;
    bit<32> telemetry_every;   /* clone 1 in N packets per port; 0: telemetry off */
    bit<32> telemetry_session; /* clone session to the collector port */
    /* Classification (set_ddl carries the job's burst detection settings). */
    bit<8>  traffic_class;
    bit<8>  job;
    bit<32> burst_gap_us;      /* G: a data packet after this much silence starts a burst */
    bit<16> burst_min_payload; /* smaller packets (pure ACKs, control messages) never start one */
    bit<16> payload_length;    /* L4 payload bytes */
    bit<1>  burst_start;
    bit<1>  announcement;      /* a PCN-START (pcn-host) */
    bit<16> announcements_ahead; /* pcn-host: announcements in the egress queue when this packet joined it */
    bit<1>  lost;              /* lost at random before its queue (loss.p4) */
    /* Egress mode. */
    bit<1>  marking;           /* 0: drop-tail */
    qdepth_t k;
    qdepth_t k_pre;
    bit<1>  drop_non_ect;
    bit<1>  use_windows;       /* pcn: look the packet's time up in predrain_windows */
    bit<1>  window_open;
    bit<1>  discount_announcements; /* pcn-host: mark at the depth without the queued announcements */
    bit<1>  behind;            /* a DDL data packet while another job's burst that started first is under way */
    qdepth_t k_behind;         /* the threshold for such packets (first served, ingress.p4); k: off */
    telemetry_meta_t tel;
}

#endif
