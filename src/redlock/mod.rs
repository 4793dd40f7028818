//! [`Redlock`]: the public client, a thin face over the engine
//! (`engine.rs`): it checks the call's input and forwards to acquiring
//! (`acquire/`), the engine's status, or the background work.
//!
//! # The files
//!
//! `client.rs`, the client and how it is made; `locks.rs`, its lock calls;
//! `roles.rs`, semaphores and leader election.

mod client;
mod locks;
mod roles;

pub use client::Redlock;
