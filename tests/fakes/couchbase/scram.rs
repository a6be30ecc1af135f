//! SCRAM-SHA512 (RFC 5802, RFC 7677): what the server stores for its user, and the HMAC and
//! PBKDF2 primitives the exchange is built on.

use hmac::Mac;
use sha2::Sha512;

/// What a real server stores for a SCRAM user: the salt, the iteration count, StoredKey and
/// ServerKey (never the password).
pub(super) struct ScramSecrets {
    pub(super) salt: Vec<u8>,
    pub(super) iterations: u32,
    pub(super) stored_key: Vec<u8>,
    pub(super) server_key: Vec<u8>,
}

pub(super) fn hmac512(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = hmac::Hmac::<Sha512>::new_from_slice(key).expect("any key length");
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

/// PBKDF2-HMAC-SHA512 with one output block (64 bytes, SCRAM-SHA512's SaltedPassword).
pub(super) fn pbkdf2_sha512(password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
    let mut block = salt.to_vec();
    block.extend_from_slice(&1u32.to_be_bytes());
    let mut u = hmac512(password, &block);
    let mut out = u.clone();
    for _ in 1..iterations {
        u = hmac512(password, &u);
        out.iter_mut().zip(&u).for_each(|(o, x)| *o ^= x);
    }
    out
}
