//! [`SharedNic`]: one NIC shared by the threads that each drive one of its queues.
//!
//! The [`Nic`] trait takes `&mut self` for the whole NIC, so the runtime puts the
//! backend behind a mutex held only for one `receive` or `transmit` call of one
//! batch; capabilities, pool and counters are copied or shared out once, so
//! reading them takes no lock.

use linerate_nic::{Batch, Counters, Nic, NicCaps, NicError, Pool, Readiness, Recorder};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A cloneable handle to one NIC; every clone is a [`Nic`] on the same device.
#[derive(Debug)]
pub struct SharedNic<N> {
    inner: Arc<Mutex<N>>,
    caps: NicCaps,
    pool: Pool,
    counters: Counters,
}

impl<N> Clone for SharedNic<N> {
    fn clone(&self) -> Self {
        SharedNic {
            inner: Arc::clone(&self.inner),
            caps: self.caps,
            pool: self.pool.clone(),
            counters: self.counters.clone(),
        }
    }
}

impl<N: Nic> SharedNic<N> {
    /// Shares `nic`.
    pub fn new(nic: N) -> SharedNic<N> {
        let caps = *nic.caps();
        let pool = nic.pool().clone();
        let counters = nic.counters().clone();
        SharedNic {
            inner: Arc::new(Mutex::new(nic)),
            caps,
            pool,
            counters,
        }
    }

    /// Runs `f` on the NIC, holding its lock.
    pub fn with<R>(&self, f: impl FnOnce(&mut N) -> R) -> R {
        f(&mut lock(&self.inner))
    }
}

impl<N: Nic> Nic for SharedNic<N> {
    fn caps(&self) -> &NicCaps {
        &self.caps
    }

    fn receive(&mut self, queue: usize, batch: &mut Batch, max: usize) -> Result<usize, NicError> {
        lock(&self.inner).receive(queue, batch, max)
    }

    fn transmit(&mut self, queue: usize, batch: &mut Batch) -> Result<usize, NicError> {
        lock(&self.inner).transmit(queue, batch)
    }

    fn readiness(&self, queue: usize) -> Result<Readiness, NicError> {
        lock(&self.inner).readiness(queue)
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn pool(&self) -> &Pool {
        &self.pool
    }

    fn set_recorder(&mut self, recorder: Option<Arc<dyn Recorder>>) {
        lock(&self.inner).set_recorder(recorder);
    }

    fn set_multicast_filter(
        &mut self,
        unicast: [u8; 6],
        groups: &[[u8; 6]],
    ) -> Result<bool, NicError> {
        lock(&self.inner).set_multicast_filter(unicast, groups)
    }
}
