# Sourced by the scripts that build for the Soft-RoCE guests (test-verbs.sh, test-cluster.sh,
# softroce/power-cut.sh, softroce/log-power-cut.sh).
#
# VERBS_FEATURES: every feature of the workspace's crates but the verbs fault-injection layer,
# for `cargo build|test --workspace --features "$VERBS_FEATURES" --test|--bin ...`. Cargo
# compiles a crate again for each set of features it is built with; one set for every build of
# these scripts compiles the stack once (a build per package, `-p X --features verbs`, gave
# each its own set, several rebuilds of the stack in a CI run). The programs run without the
# fault-injection layer, as shipped; the tests of that layer (`verbs_faults`) are built with
# --all-features, the set of scripts/test-all.sh's `cargo test --workspace --all-features`.
VERBS_FEATURES=rpma/mock,rpma/verbs,rpma/tokio,rpma/mio,rpma/tracing
VERBS_FEATURES+=,rpma-log/tokio,rpma-log/testing,rpma-log/verbs
VERBS_FEATURES+=,rpma-scenarios/verbs,rpma-bench/verbs,rpma-cli/verbs,rpma-testbins/verbs,rpma-testbins/testing
VERBS_FEATURES+=,rpma-capi/verbs,rpma-examples/tokio,rpma-examples/verbs
export VERBS_FEATURES
