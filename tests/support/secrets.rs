//! Planted secrets and the check that no fragment of one survives.

/// `len` deterministic pseudo-random alphanumeric characters.
pub(crate) fn random_token(seed: u64, len: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ALPHABET[((x >> 33) % ALPHABET.len() as u64) as usize] as char
        })
        .collect()
}

/// Asserts that no 6-character window of `secret` appears in `text`.
pub(crate) fn assert_no_fragment(text: &str, secret: &str) {
    let chars: Vec<char> = secret.chars().collect();
    for w in chars.windows(6) {
        let fragment: String = w.iter().collect();
        assert!(
            !text.contains(&fragment),
            "secret fragment `{fragment}` survived in: {text}"
        );
    }
}

/// Three secret-bearing bodies longer than 512 characters: an `sk-` key, a
/// bearer token and an `x-api-key` value, each a 600-character token.
/// Returns `(body, secret)`.
///
/// The `sk-` key straddles the excerpt boundary so that bounding *before*
/// redacting would keep `sk-` and only 6 characters of the key — too few to
/// still look like a key — and leak them.
pub(crate) fn secret_bodies() -> Vec<(String, String)> {
    let sk = random_token(1, 600);
    let bearer = random_token(2, 600);
    let api_key = random_token(3, 600);
    vec![
        (
            format!(
                r#"{{"error":{{"message":"{} Incorrect API key provided: sk-{sk}","type":"invalid_request_error"}}}}"#,
                "x".repeat(452)
            ),
            sk,
        ),
        (
            format!("upstream rejected header Authorization: Bearer {bearer}\nplease retry"),
            bearer.clone(),
        ),
        (
            format!(
                r#"{{"echo":{{"x-api-key":"{api_key}","note":"{}"}}}}"#,
                "y".repeat(300)
            ),
            api_key,
        ),
    ]
}
