//! Helpers for engine tests that need an emulator or a control plane.

/// Reads the endpoint of an emulator from the environment variable `var`.
///
/// Returns `None` (after saying why on stderr) when it is unset, so a developer
/// without the emulator can still run the other tests.
///
/// # Panics
///
/// When `var` is unset and `TASKGATE_REQUIRE_E2E=1`: CI must not skip these tests.
#[must_use]
pub fn e2e_endpoint(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(value) if !value.is_empty() => Some(value),
        _ => {
            assert!(
                std::env::var("TASKGATE_REQUIRE_E2E").as_deref() != Ok("1"),
                "{var} is not set and TASKGATE_REQUIRE_E2E=1: start the emulator (scripts/test.sh does)"
            );
            eprintln!("skipping: {var} is not set (run scripts/test.sh to start the emulator)");
            None
        }
    }
}
