"""The limits one machine imposes on an experiment file: the rates BMv2 keeps up with, and the bounds that keep
any input from hanging the tool or exhausting memory. The schema (schema.py) applies them to its keys."""

# One TCP flow through one BMv2 switch reaches about BMV2_FLOW_MBPS on the fast build and
# BMV2_FLOW_MBPS_PACKET_LOG on the logging build (packet_log) on a 2-core machine. A link must stay well
# below that so the configured queue rate, not the switch's CPU, is the bottleneck, with room for several
# flows, telemetry clones and the controller on the same cores.
BMV2_FLOW_MBPS = 450
BMV2_FLOW_MBPS_PACKET_LOG = 200
MAX_LINK_MBPS = 100.0
MAX_LINK_MBPS_PACKET_LOG = 50.0
MAX_LINK_MBPS_BRIDGE = 1000.0      # Linux bridge + tc: not CPU-bound at these rates
MIN_LINK_MBPS = 0.1
MAX_RUNS = 1000                    # sweep points x repetitions
MAX_FLOWS = 500                    # background flows (src x dst pairs): two iperf3 processes each
MAX_DURATION_S = 86_400            # no time of an experiment is longer than a day (durations, periods)
MAX_BYTES = 1 << 30                # a burst or an answer, which the generator holds in memory: 1 GiB
MAX_TIME_SCALE = 100.0             # time_scale: a machine this much slower than the regime's
