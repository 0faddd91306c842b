//! Every integration test in one binary (one link instead of one per file), one module per
//! topic. The fixtures are in `tests/common/`, shared with the checker (`tests/checker/`),
//! which keeps its own harness. Run one topic with `cargo test --test integration store_zk::`.

#[path = "../common/mod.rs"]
mod common;

mod action;
mod any;
mod bad_input;
mod checker_bounds;
mod ci_recipes;
mod cli;
mod completion;
mod conformance;
mod conn_limits;
mod cron;
mod default_store;
mod doctor;
mod doctor_limits;
mod engine_fences;
mod etcd_member_cut;
mod exclusion;
mod file_host;
mod forget;
mod frozen;
mod generated;
mod held_for;
mod holder;
mod hygiene;
mod job_control;
mod job_life;
mod json_contract;
mod keepalive;
mod layers;
mod lost_grant;
mod lost_messages;
mod lost_signal;
mod metrics;
mod minority;
mod mixed;
mod modes;
mod multilock;
mod nested;
mod previous;
mod process_tree;
mod proxy;
mod quorum;
mod refused;
mod regressions;
mod release_retry;
mod server_life;
mod shards;
mod store_dynamodb;
mod store_etcd;
mod store_life;
mod store_nats;
mod store_nats_batch;
mod store_redis;
mod store_redis_cluster;
mod store_s3;
mod store_sql;
mod store_zk;
mod supervisor;
mod token_output;
mod vanished_store;
mod waiter;
