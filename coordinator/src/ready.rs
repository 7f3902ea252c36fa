//! Readiness and model discovery against the target before a run: `GET /v1/models`
//! polled until it answers 200 (`--ready-timeout`), and the first model it lists when
//! `--model` is not given.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use std::sync::Arc;
use std::time::{Duration, Instant};
use surge_agent::engine::conn::{Connector, Sender, Target};
use surge_agent::engine::stats::Stats;

/// One `GET {base}/v1/models`: status and body.
async fn get_models(base_url: &str) -> Result<(u16, Bytes), String> {
    let target = Target::resolve(base_url).await.map_err(|e| e.to_string())?;
    let uri = target.uri("/v1/models", false);
    let authority = target.authority.clone();
    let connector = Connector::new(target, false).map_err(|e| e.to_string())?;
    let stats = Arc::new(Stats::default());
    let conn = tokio::time::timeout(Duration::from_secs(5), connector.connect(&stats))
        .await
        .map_err(|_| "connect timed out after 5s".to_string())?
        .map_err(|(_, m)| m)?;
    let Sender::H1(mut send) = conn.sender else { return Err("unexpected HTTP/2 connection".into()) };
    let req = http::Request::get(uri)
        .header(http::header::HOST, authority)
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let fut = async {
        let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok::<_, String>((status, body))
    };
    tokio::time::timeout(Duration::from_secs(5), fut).await.map_err(|_| "no answer within 5s".to_string())?
}

/// Polls until `/v1/models` answers 200 or `timeout` passes.
pub async fn wait_ready(base_url: &str, timeout: Duration) -> Result<(), String> {
    let until = Instant::now() + timeout;
    loop {
        let last = match get_models(base_url).await {
            Ok((200, _)) => return Ok(()),
            Ok((s, _)) => format!("HTTP {s}"),
            Err(e) => e,
        };
        if Instant::now() >= until {
            return Err(format!("{base_url}/v1/models not ready within {timeout:?} (last: {last})"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The first model id listed at `/v1/models`.
pub async fn first_model(base_url: &str) -> Result<String, String> {
    let (status, body) = get_models(base_url).await?;
    if status != 200 {
        return Err(format!("GET {base_url}/v1/models answered HTTP {status}"));
    }
    let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| format!("GET /v1/models: {e}"))?;
    v["data"][0]["id"].as_str().map(str::to_string).ok_or_else(|| "GET /v1/models listed no model".into())
}
