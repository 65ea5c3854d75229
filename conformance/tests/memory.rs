//! The reference store against the suite.

use jobstore_api::MemoryStore;
use jobstore_conformance::TestStore;

async fn factory() -> Option<TestStore> {
    Some(TestStore::new(MemoryStore::new()))
}

jobstore_conformance::conformance_tests!(factory);
