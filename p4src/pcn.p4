/* PCN Lab's switch program for BMv2 simple_switch_grpc (P4_16, v1model): forwarding, DDL/background
 * classes, ECN marking on queue depth, PCN pre-drain windows, pcn-host announcements, burst-start
 * digests and queue telemetry. Modes and thresholds are table entries: no recompilation to change them. */
#include <core.p4>
#include <v1model.p4>

#include "headers.p4"
#include "state.p4"
#include "parser.p4"
#include "ingress.p4"
#include "egress.p4"
#include "deparser.p4"

V1Switch(PcnParser(), PcnVerifyChecksum(), PcnIngress(), PcnEgress(),
         PcnComputeChecksum(), PcnDeparser()) main;
