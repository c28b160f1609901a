//! Structured logs on stderr for `lake`, filtered by `LAKE_LOG`
//! (tracing's env-filter syntax, e.g. `info` or `lake_lance=debug`; default `warn`).

/// Installs the stderr subscriber.
pub(crate) fn init() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LAKE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        // A log line that cannot be written (stderr closed, a broken pipe) is dropped: the
        // subscriber's own report of it would go through std's panicking `eprintln!`.
        .log_internal_errors(false)
        .init();
}
