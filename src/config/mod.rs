//! Configuration: the options a [`RedlockBuilder`] collects (defaults as
//! its associated constants), checked into a [`Config`] that the engine runs
//! on. Making the client out of them, [`RedlockBuilder::build`], belongs to
//! the client (`redlock/`), which this folder does not know.
//!
//! # The files
//!
//! `options.rs`, the checked [`Config`] and what follows from it (the
//! patience of a `lock` call, the fencing counter's key); `builder.rs`,
//! [`RedlockBuilder`]: each option with its default and range, and the
//! checks, with `judging.rs`, its options for judging the nodes (restarts,
//! failovers, clock steps, losses of data, eviction, replicas); `url.rs`, a
//! node from its URL, and a URL shown without its password.

mod builder;
mod judging;
mod options;
mod url;

pub use builder::RedlockBuilder;
pub(crate) use options::Config;
