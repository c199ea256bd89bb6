//! chitti: a command-line agent whose every shell call runs inside an OS-native sandbox.
//!
//! Layers, top to bottom (arrows only point down): `cli` → `agent`/`mcp` → `tools` →
//! `exec` → `sandbox` → `policy`. `name_service` is a leaf that `policy` and `provider` use;
//! `canonical` is a leaf for every layer.

pub mod agent;
pub mod canonical;
pub mod cli;
pub mod config;
pub mod exec;
pub mod mcp;
pub mod name_service;
pub mod policy;
pub mod provider;
pub mod sandbox;
pub mod tools;
pub mod verify;

/// With musl, Rust's allocations go to dlmalloc (Cargo.toml says why), in both binaries.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;
