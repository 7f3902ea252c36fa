//! `surge fleet check`'s question to an agent: may it load the target (its allowlist), and
//! does the target answer `GET /v1/models` from this host, in how long?

use super::AgentSettings;

/// How long the fleet check's request to the target may take.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// `surge fleet check`'s question: may this agent load the target, and does it answer
/// `GET /v1/models` from here (and in how long)?
pub(crate) async fn probe(settings: &AgentSettings, p: surge_proto::Probe) -> surge_proto::ProbeReply {
    let mut reply = surge_proto::ProbeReply { id: p.id, ..Default::default() };
    if let Err(refused) = settings.allowed.check(&p.base_url).await {
        reply.error = refused.to_string();
        return reply;
    }
    reply.allowed = true;
    let tls = crate::engine::tls::TargetTls { insecure: p.insecure, ca_pem: p.ca_pem };
    let t = std::time::Instant::now();
    match crate::client::get_from(
        settings.local_address,
        &tls,
        p.base_url.trim_end_matches('/'),
        "/v1/models",
        PROBE_TIMEOUT,
    )
    .await
    {
        Ok(r) => {
            reply.ms = t.elapsed().as_secs_f64() * 1e3;
            reply.http_status = u32::from(r.status);
            if r.status != 200 {
                reply.error = format!("GET /v1/models: HTTP {}", r.status);
            }
        }
        Err(e) => reply.error = format!("GET /v1/models: {e}"),
    }
    reply
}
