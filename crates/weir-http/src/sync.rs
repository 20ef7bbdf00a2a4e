//! Locking shared state that a panicked holder may have left poisoned.
//! Never holds state of its own.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, poisoned or not: every lock weir takes guards state a panic
/// cannot leave half-written (a buffer, a list, a counter), and one
/// panicked request must not take every later one down with it.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
