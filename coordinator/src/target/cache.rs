//! `--reset-prefix-cache` (sweeps and capacity searches): `POST /reset_prefix_cache` to
//! the target before a level-run, over the same transport as the load.

/// `--reset-prefix-cache`: every endpoint's prefix cache emptied before a level-run (D69),
/// or why not, with the server's answer (the caller stops there).
pub async fn reset_prefix_cache(p: &crate::plan::RunPlan) -> Result<(), String> {
    let tls = p.target_tls.client();
    for e in &p.endpoints.list {
        let refused = |why: String| {
            format!(
                "--reset-prefix-cache: POST {}/reset_prefix_cache {why} (vLLM serves it with VLLM_SERVER_DEV_MODE=1)",
                e.url
            )
        };
        match surge_core::client::post_empty(&tls, &e.url, "/reset_prefix_cache", RESET_TIMEOUT).await {
            Ok(r) if (200..300).contains(&r.status) => {}
            Ok(r) => {
                return Err(refused(format!(
                    "answered HTTP {}: {}",
                    r.status,
                    String::from_utf8_lossy(&r.body).trim()
                )));
            }
            Err(e) => return Err(refused(format!("failed: {e}"))),
        }
    }
    Ok(())
}

/// How long a prefix-cache reset may take.
const RESET_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
