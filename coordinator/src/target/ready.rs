//! Readiness and model discovery against the target before a run: `GET /v1/models`
//! polled until it answers 200 (`--ready-timeout`), and the first model it lists when
//! `--model` is not given. Requests go through the agent's single-request client
//! ([`surge_core::client`]), the same connector as the load.

use std::time::{Duration, Instant};
use surge_core::client::{self, Response};
use surge_core::transport::tls::TargetTls;

/// How long one `GET /v1/models` may take, connection included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// One `GET {base}/v1/models`, checking an https target's certificate as `tls` says.
async fn get_models(tls: &TargetTls, base_url: &str) -> Result<Response, String> {
    client::get_tls(tls, base_url, "/v1/models", REQUEST_TIMEOUT).await.map_err(|e| e.to_string())
}

/// Polls until `/v1/models` answers 200 or `timeout` passes.
pub async fn wait_ready(tls: &TargetTls, base_url: &str, timeout: Duration) -> Result<(), String> {
    let until = Instant::now() + timeout;
    loop {
        let last = match get_models(tls, base_url).await {
            Ok(Response { status: 200, .. }) => return Ok(()),
            Ok(Response { status, .. }) => format!("HTTP {status}"),
            Err(e) => e,
        };
        if Instant::now() >= until {
            return Err(format!("{base_url}/v1/models not ready within {timeout:?} (last: {last})"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The first model id listed at `/v1/models`.
pub async fn first_model(tls: &TargetTls, base_url: &str) -> Result<String, String> {
    let Response { status, body } = get_models(tls, base_url).await?;
    if status != 200 {
        return Err(format!("GET {base_url}/v1/models answered HTTP {status}"));
    }
    let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| format!("GET /v1/models: {e}"))?;
    v["data"][0]["id"].as_str().map(str::to_string).ok_or_else(|| "GET /v1/models listed no model".into())
}
