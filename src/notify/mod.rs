//! LISTEN/NOTIFY, in three roles: a listener per worker and per client
//! (`listen`), the hub that wakes handles waiting for results (`waiters`),
//! and the sender of notifications after the library's own commits (`send`).

mod listen;
mod send;
mod waiters;

pub(crate) use listen::{ListenEvent, spawn_listener};
pub(crate) use send::Notifier;
pub(crate) use waiters::WaiterHub;
