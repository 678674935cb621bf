//! Secrets kept out of logs, errors and `config check`.

/// `scheme://user:***@host/...`, and `password=***` in the query. Conservative:
/// the credentials end at the *last* `@` before the query, so a password
/// holding `/` or `@` is still hidden.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "***".into();
    };
    let (main, query) = match rest.split_once('?') {
        Some((m, q)) => (m, Some(q)),
        None => (rest, None),
    };
    let mut out = format!("{scheme}://");
    match main.rsplit_once('@') {
        Some((cred, host)) => {
            let user = cred.split(':').next().unwrap_or("");
            let pass = if cred.contains(':') { ":***" } else { "" };
            out.push_str(&format!("{user}{pass}@{host}"));
        }
        None => out.push_str(main),
    }
    if let Some(q) = query {
        let params: Vec<String> = q
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _)) if k.to_ascii_lowercase().contains("pass") => format!("{k}=***"),
                _ => p.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}
