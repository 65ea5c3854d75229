//! The reference store behind a store layer that writes no method, only an
//! `around` hook counting calls: the suite passes through the layer's
//! default forwarding, and every test's calls went through the hook.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use jobstore_api::layer::StoreFuture;
use jobstore_api::{JobStore, MemoryStore};
use jobstore_conformance::TestStore;

/// Counts every forwarded call.
#[derive(Debug)]
struct CountCalls<S> {
    inner: S,
    calls: Arc<AtomicU64>,
}

impl<S: JobStore> jobstore_api::layer::StoreLayer for CountCalls<S> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }

    fn around<'a, T: Send + 'a>(
        &'a self,
        _op: &'static str,
        call: StoreFuture<'a, T>,
    ) -> StoreFuture<'a, T> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        call
    }
}

async fn factory() -> Option<TestStore> {
    let calls = Arc::new(AtomicU64::new(0));
    let store = CountCalls {
        inner: MemoryStore::new(),
        calls: calls.clone(),
    };
    Some(TestStore::new(store).with_cleanup(async move {
        assert!(
            calls.load(Ordering::Relaxed) > 0,
            "no call went through the layer"
        );
    }))
}

jobstore_conformance::conformance_tests!(factory);
