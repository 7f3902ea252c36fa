//! Where a run's requests go (D69): `--base-url` once or repeated, or `--endpoints FILE`
//! (a base URL per line, then optionally its weight and its name), the policy that
//! spreads requests over them, and `--replica-header`; each URL checked as one.

use super::UsageError;
use crate::plan::{EndpointPlan, EndpointsPlan, default_name};
use std::path::Path;

/// Most endpoints a run may name.
pub const MAX_ENDPOINTS: usize = 64;

/// `url` if it is an http(s) URL with a host, without its trailing `/`.
fn checked(url: &str, origin: &str) -> Result<String, UsageError> {
    match super::url::http(url) {
        Some(_) => Ok(url.trim_end_matches('/').to_string()),
        None => Err(UsageError(format!(
            "{origin} {url:?}: expected http://HOST[:PORT] or https://... (a port from 1 to 65535)"
        ))),
    }
}

/// The lines of an endpoints file: `URL [WEIGHT [NAME]]`, `#` comments, blank lines.
pub fn read_file(path: &Path) -> Result<Vec<EndpointPlan>, UsageError> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| UsageError(format!("--endpoints {shown}: {e}")))?;
    let mut list = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let at = format!("--endpoints {shown}:{}", n + 1);
        let mut words = line.split_whitespace();
        let url = checked(words.next().unwrap_or_default(), &at)?;
        let weight = match words.next() {
            None => 1,
            Some(w) => match w.parse::<u32>() {
                Ok(w @ 1..=1000) => w,
                _ => return Err(UsageError(format!("{at}: weight {w:?}: expected a whole number from 1 to 1000"))),
            },
        };
        let name = words.next().map(str::to_string);
        if let Some(extra) = words.next() {
            return Err(UsageError(format!("{at}: unexpected {extra:?} (URL [WEIGHT [NAME]])")));
        }
        let name = name.unwrap_or_else(|| default_name(&url));
        list.push(EndpointPlan { url, weight, name });
    }
    if list.is_empty() {
        return Err(UsageError(format!("--endpoints {shown}: no endpoint in the file")));
    }
    Ok(list)
}

/// Names made distinct: a default name shared by two endpoints gets its URL's path, then
/// its position; a given name used twice is refused.
fn distinct(list: &mut [EndpointPlan]) -> Result<(), UsageError> {
    let clash =
        |list: &[EndpointPlan], i: usize| list.iter().enumerate().any(|(j, e)| j != i && e.name == list[i].name);
    // Those that share a default name, found before any is renamed.
    let shared: Vec<usize> =
        (0..list.len()).filter(|&i| clash(list, i) && list[i].name == default_name(&list[i].url)).collect();
    for &i in &shared {
        let path = list[i].url.parse::<http::Uri>().map(|u| u.path().to_string()).unwrap_or_default();
        list[i].name = format!("{}{}", list[i].name, path.trim_end_matches('/'));
    }
    let still: Vec<usize> = shared.into_iter().filter(|&i| clash(list, i)).collect();
    for &i in &still {
        list[i].name = format!("{}#{i}", list[i].name);
    }
    for (i, e) in list.iter().enumerate() {
        if list[..i].iter().any(|o| o.name == e.name) {
            return Err(UsageError(format!("endpoint name {:?} is given to two endpoints", e.name)));
        }
    }
    Ok(())
}

/// The run's endpoints from its flags (`host_port`: --host/--port's URL when no URL is given).
pub fn plan(
    base_urls: &[String],
    file: Option<&Path>,
    policy: super::EndpointPolicyArg,
    replica_header: Option<&str>,
    (host, port): (&str, u16),
) -> Result<EndpointsPlan, UsageError> {
    let mut list = match file {
        Some(path) => read_file(path)?,
        None if base_urls.is_empty() => {
            let url = super::url::from_host(host, port).ok_or_else(|| {
                UsageError(format!("--host {host:?} --port {port}: not a host name or address and a port"))
            })?;
            vec![EndpointPlan { name: default_name(&url), url, weight: 1 }]
        }
        None => base_urls
            .iter()
            .map(|u| {
                let url = checked(u, "--base-url")?;
                Ok(EndpointPlan { name: default_name(&url), url, weight: 1 })
            })
            .collect::<Result<_, UsageError>>()?,
    };
    if list.len() > MAX_ENDPOINTS {
        return Err(UsageError(format!("{} endpoints: at most {MAX_ENDPOINTS}", list.len())));
    }
    distinct(&mut list)?;
    let replica_header = match replica_header {
        None => None,
        Some(h) => match http::HeaderName::try_from(h) {
            Ok(name) => Some(name.as_str().to_string()),
            Err(_) => return Err(UsageError(format!("--replica-header {h:?}: not a header name"))),
        },
    };
    Ok(EndpointsPlan { list, policy: policy.wire(), replica_header })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::EndpointPolicyArg;

    fn names(p: &EndpointsPlan) -> Vec<&str> {
        p.list.iter().map(|e| e.name.as_str()).collect()
    }

    #[test]
    fn urls_get_names_and_a_file_gives_weights_and_names() {
        let urls = ["http://10.0.0.1:8000/".to_string(), "http://10.0.0.2:8000".into(), "https://h/v2".into()];
        let p = plan(&urls, None, EndpointPolicyArg::Session, Some("X-Served-By"), ("", 0)).unwrap();
        assert_eq!(names(&p), ["10.0.0.1:8000", "10.0.0.2:8000", "h:443"]);
        assert_eq!(p.list[0].url, "http://10.0.0.1:8000", "no trailing slash");
        assert_eq!(
            (p.policy, p.replica_header.as_deref()),
            (surge_proto::EndpointPolicy::Session, Some("x-served-by"))
        );
        let same = ["http://h:1/a".to_string(), "http://h:1/b".into()];
        let p = plan(&same, None, EndpointPolicyArg::RoundRobin, None, ("", 0)).unwrap();
        assert_eq!(names(&p), ["h:1/a", "h:1/b"], "a shared host:port gets the path");
        let dir = std::env::temp_dir().join(format!("surge-endpoints-a-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("e.txt");
        std::fs::write(&f, "# fleet\nhttp://a:1 3 gpu-a\n\nhttp://b:2   # default weight\n").unwrap();
        let p = plan(&[], Some(&f), EndpointPolicyArg::RoundRobin, None, ("", 0)).unwrap();
        assert_eq!(names(&p), ["gpu-a", "b:2"]);
        assert_eq!(p.list.iter().map(|e| e.weight).collect::<Vec<_>>(), [3, 1]);
        let p = plan(&[], None, EndpointPolicyArg::RoundRobin, None, ("127.0.0.1", 8000)).unwrap();
        assert_eq!(names(&p), ["127.0.0.1:8000"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_lines_name_the_file_and_line() {
        let dir = std::env::temp_dir().join(format!("surge-endpoints-b-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("e.txt");
        let err = |text: &str| {
            std::fs::write(&f, text).unwrap();
            plan(&[], Some(&f), EndpointPolicyArg::RoundRobin, None, ("", 0)).unwrap_err().0
        };
        assert!(err("http://a:1\nftp://b\n").contains("e.txt:2"), "{}", err("http://a:1\nftp://b\n"));
        assert!(err("http://a:1 0\n").contains("weight \"0\""));
        assert!(err("http://a:1 1 x y\n").contains("unexpected \"y\""));
        assert!(err("# nothing\n").contains("no endpoint"));
        assert!(err("http://a:1 1 x\nhttp://b:1 1 x\n").contains("\"x\" is given to two"));
        let bad = plan(&["http://a:1".into()], None, EndpointPolicyArg::RoundRobin, Some("bad header"), ("", 0));
        assert!(bad.unwrap_err().0.contains("--replica-header"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
