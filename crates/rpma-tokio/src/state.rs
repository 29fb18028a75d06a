//! A connection's state shared by its futures: the connection and its dispatcher, under one
//! lock ([`State`]).

use std::sync::{Mutex, MutexGuard, PoisonError};

use rpma_core::{Conn, Transport};

use crate::dispatch::Dispatch;

/// The connection and its dispatcher.
#[derive(Debug)]
pub(crate) struct Inner<T: Transport> {
    pub(crate) conn: Conn<T>,
    pub(crate) dispatch: Dispatch,
}

/// [`Inner`] under its lock, taken for each post and each poll of the CQs and never held across
/// an await.
#[derive(Debug)]
pub(crate) struct State<T: Transport>(Mutex<Inner<T>>);

impl<T: Transport> State<T> {
    pub(crate) fn new(conn: Conn<T>) -> Self {
        Self(Mutex::new(Inner { conn, dispatch: Dispatch::default() }))
    }

    /// The connection and its dispatcher, locked. A panic while it was held (none of this
    /// crate's sections panics) leaves the state consistent, so a poisoned lock is taken as is.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner<T>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state, unlocked for good.
    pub(crate) fn into_inner(self) -> Inner<T> {
        self.0.into_inner().unwrap_or_else(PoisonError::into_inner)
    }
}
