//! A counting allocator for the allocation guards (D74): the token path's
//! (`agent/tests/alloc.rs`) and the ingest path's (`coordinator/tests/alloc.rs`). Each
//! call is handed to the system's allocator unchanged; allocations (and reallocations) are
//! counted process-wide. Only with the `count-allocations` feature, which only those test
//! binaries turn on.

// The only unsafe code of the workspace's libraries: each method forwards to `System`.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// Install with `#[global_allocator] static A: Counting = Counting;`.
pub struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

impl Counting {
    /// Allocations and reallocations so far, in this process.
    pub fn count() -> u64 {
        ALLOCATIONS.load(Ordering::Relaxed)
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
