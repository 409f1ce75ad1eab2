//! What issuing under an existing CA certificate needs from it — its subject name and
//! its subject key identifier — read from the certificate's DER (`certs::Ca::load`).
//!
//! A certificate chains to its issuer by name: the `issuer` of every certificate we
//! issue must be the CA's `subject`, byte for byte, and its authority key identifier
//! the CA's subject key identifier (OpenSSL refuses a chain where they differ). rcgen
//! can read both back with its `x509-parser` feature, which brings a general ASN.1
//! stack (x509-parser, asn1-rs, der-parser, num-bigint, nom: about a tenth of the first
//! build's CPU) for these two fields; this file walks the few DER elements on the way
//! to them instead. The walk is bounded by the input (no allocation on a claimed
//! length) and gives up on anything it does not expect: the caller reports the file as
//! not a usable CA certificate.
//!
//! The same walk reads two things webpki checks but does not expose, for the TLS
//! checks (`tls/checks.rs`): an end-entity certificate's validity dates (an agent's
//! own certificate is checked against them even without a CA to verify it against),
//! and whether it names the serverAuth extended key usage *explicitly* (webpki also
//! accepts a certificate without the extension, and applies its usage check to
//! intermediates too, which often lack it).

use rcgen::string::{BmpString, Ia5String, PrintableString, TeletexString, UniversalString};
use rcgen::{DistinguishedName, DnType, DnValue, KeyIdMethod};

/// The subject name and key identifier of a CA certificate.
#[derive(Debug)]
pub(crate) struct CaIdentity {
    /// The subject, as rcgen re-encodes it: the same attributes, types and string
    /// types in the same order, so the same bytes.
    pub name: DistinguishedName,
    /// The certificate's subject key identifier if it has one; else rcgen derives one
    /// from the key as it did when it made the CA.
    pub key_id: KeyIdMethod,
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const OCTET_STRING: u8 = 0x04;
const BOOLEAN: u8 = 0x01;
/// `[0] EXPLICIT Version`.
const VERSION: u8 = 0xa0;
/// `[3] EXPLICIT Extensions`.
const EXTENSIONS: u8 = 0xa3;
/// id-ce-subjectKeyIdentifier, 2.5.29.14, as DER content.
const SUBJECT_KEY_ID: &[u8] = &[0x55, 0x1d, 0x0e];

/// Reads the subject and key identifier of a DER certificate; `None` if it is not a
/// certificate whose name rcgen can reproduce exactly (a multi-valued RDN, an
/// attribute type twice, a string type X.509 names do not use).
pub(crate) fn read_ca_identity(cert_der: &[u8]) -> Option<CaIdentity> {
    let mut outer = Der(cert_der);
    let mut cert = Der(outer.expect(SEQUENCE)?);
    let mut tbs = Der(cert.expect(SEQUENCE)?);
    tbs.skip_if(VERSION)?;
    tbs.expect(0x02)?; // serialNumber
    tbs.expect(SEQUENCE)?; // signature
    tbs.expect(SEQUENCE)?; // issuer
    tbs.expect(SEQUENCE)?; // validity
    let name = read_name(tbs.expect(SEQUENCE)?)?;
    tbs.expect(SEQUENCE)?; // subjectPublicKeyInfo
    let mut key_id = KeyIdMethod::Sha256;
    while let Some((tag, content)) = tbs.next()? {
        // issuerUniqueID [1] and subjectUniqueID [2] are skipped like anything else.
        if tag == EXTENSIONS
            && let Some(id) = read_subject_key_id(content)?
        {
            key_id = KeyIdMethod::PreSpecified(id);
        }
    }
    Some(CaIdentity { name, key_id })
}

/// id-ce-extKeyUsage, 2.5.29.37, as DER content.
const EXT_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x25];
/// id-kp-serverAuth, 1.3.6.1.5.5.7.3.1, as DER content.
const SERVER_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// What the TLS checks read of an end-entity certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EndEntityFacts {
    /// notBefore, in seconds since the Unix epoch.
    pub not_before: i64,
    /// notAfter, in seconds since the Unix epoch.
    pub not_after: i64,
    /// Whether the extended key usage extension lists serverAuth; `None` without the
    /// extension.
    pub server_auth: Option<bool>,
}

/// Reads the validity dates and the serverAuth usage of a DER certificate; `None` if
/// it is not DER this reader takes.
pub(crate) fn read_end_entity_facts(cert_der: &[u8]) -> Option<EndEntityFacts> {
    let mut outer = Der(cert_der);
    let mut cert = Der(outer.expect(SEQUENCE)?);
    let mut tbs = Der(cert.expect(SEQUENCE)?);
    tbs.skip_if(VERSION)?;
    tbs.expect(0x02)?; // serialNumber
    tbs.expect(SEQUENCE)?; // signature
    tbs.expect(SEQUENCE)?; // issuer
    let mut validity = Der(tbs.expect(SEQUENCE)?);
    let not_before = read_time(&mut validity)?;
    let not_after = read_time(&mut validity)?;
    if !validity.is_empty() {
        return None;
    }
    tbs.expect(SEQUENCE)?; // subject
    tbs.expect(SEQUENCE)?; // subjectPublicKeyInfo
    let mut server_auth = None;
    while let Some((tag, content)) = tbs.next()? {
        if tag == EXTENSIONS
            && let Some(value) = read_extension(content, EXT_KEY_USAGE)?
        {
            // ExtKeyUsageSyntax ::= SEQUENCE SIZE (1..MAX) OF KeyPurposeId
            let mut wrapper = Der(value);
            let mut purposes = Der(wrapper.expect(SEQUENCE)?);
            let mut found = false;
            while let Some((tag, purpose)) = purposes.next()? {
                if tag != OID {
                    return None;
                }
                found |= purpose == SERVER_AUTH;
            }
            server_auth = Some(found);
        }
    }
    Some(EndEntityFacts {
        not_before,
        not_after,
        server_auth,
    })
}

/// `Time ::= CHOICE { utcTime UTCTime, generalTime GeneralizedTime }` in its DER form
/// (`YYMMDDHHMMSSZ` or `YYYYMMDDHHMMSSZ`), as seconds since the Unix epoch.
fn read_time(reader: &mut Der<'_>) -> Option<i64> {
    let (tag, content) = reader.next()??;
    let digits = |range: std::ops::Range<usize>| -> Option<u16> {
        let text = content.get(range)?;
        if !text.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(text).ok()?.parse().ok()
    };
    let (year, rest) = match (tag, content.len()) {
        // RFC 5280 4.1.2.5.1: YY >= 50 is 19YY, else 20YY.
        (UTC_TIME, 13) => {
            let yy = digits(0..2)?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, 2)
        }
        (GENERALIZED_TIME, 15) => (digits(0..4)?, 4),
        _ => return None,
    };
    if content.last() != Some(&b'Z') {
        return None;
    }
    let field =
        |i: usize| -> Option<u8> { u8::try_from(digits(rest + 2 * i..rest + 2 * i + 2)?).ok() };
    let month = time::Month::try_from(field(0)?).ok()?;
    let date = time::Date::from_calendar_date(i32::from(year), month, field(1)?).ok()?;
    let at = date.with_hms(field(2)?, field(3)?, field(4)?).ok()?;
    Some(at.assume_utc().unix_timestamp())
}

/// `[3] EXPLICIT SEQUENCE OF Extension`: the value (extnValue's content) of the
/// extension `id`, if present.
fn read_extension<'a>(explicit: &'a [u8], id: &[u8]) -> Option<Option<&'a [u8]>> {
    let mut wrapper = Der(explicit);
    let mut extensions = Der(wrapper.expect(SEQUENCE)?);
    while let Some((tag, extension)) = extensions.next()? {
        if tag != SEQUENCE {
            return None;
        }
        let mut extension = Der(extension);
        let this = extension.expect(OID)?;
        extension.skip_if(BOOLEAN)?; // critical
        let value = extension.expect(OCTET_STRING)?;
        if this == id {
            return Some(Some(value));
        }
    }
    Some(None)
}

/// `Name ::= SEQUENCE OF SET OF AttributeTypeAndValue`, one attribute per set.
fn read_name(content: &[u8]) -> Option<DistinguishedName> {
    let mut rdns = Der(content);
    let mut name = DistinguishedName::new();
    let mut seen: Vec<DnType> = Vec::new();
    while let Some((tag, rdn)) = rdns.next()? {
        if tag != SET {
            return None;
        }
        let mut rdn = Der(rdn);
        let mut attribute = Der(rdn.expect(SEQUENCE)?);
        if !rdn.is_empty() {
            return None; // several attributes in one RDN: rcgen writes one per set
        }
        let ty = DnType::from_oid(&oid_arcs(attribute.expect(OID)?)?);
        let (value_tag, value) = attribute.next()?.filter(|_| attribute.is_empty())?;
        if seen.contains(&ty) {
            return None; // rcgen keeps one value per type
        }
        seen.push(ty.clone());
        name.push(ty, dn_value(value_tag, value)?);
    }
    Some(name)
}

/// The value of an attribute, in its own string type (rcgen writes each type back
/// with its tag and the same bytes).
fn dn_value(tag: u8, bytes: &[u8]) -> Option<DnValue> {
    let text = || std::str::from_utf8(bytes).ok();
    Some(match tag {
        0x0c => DnValue::Utf8String(text()?.to_owned()),
        0x13 => DnValue::PrintableString(PrintableString::try_from(text()?).ok()?),
        0x14 => DnValue::TeletexString(TeletexString::try_from(text()?).ok()?),
        0x16 => DnValue::Ia5String(Ia5String::try_from(text()?).ok()?),
        0x1c => DnValue::UniversalString(UniversalString::from_utf32be(bytes.to_vec()).ok()?),
        0x1e => DnValue::BmpString(BmpString::from_utf16be(bytes.to_vec()).ok()?),
        _ => return None,
    })
}

/// `[3] EXPLICIT SEQUENCE OF Extension`: the subject key identifier's bytes, if present.
fn read_subject_key_id(explicit: &[u8]) -> Option<Option<Vec<u8>>> {
    let Some(value) = read_extension(explicit, SUBJECT_KEY_ID)? else {
        return Some(None);
    };
    // extnValue holds `SubjectKeyIdentifier ::= OCTET STRING`.
    let mut inner = Der(value);
    let key_id = inner.expect(OCTET_STRING)?;
    Some(Some(key_id.to_vec()))
}

/// An object identifier's arcs (the first byte holds the first two).
fn oid_arcs(content: &[u8]) -> Option<Vec<u64>> {
    let (&first, rest) = content.split_first()?;
    let mut arcs = vec![u64::from(first / 40).min(2), 0];
    arcs[1] = u64::from(first) - arcs[0] * 40;
    if first & 0x80 != 0 {
        return None; // a first arc past 2.47: not in any name we issue under
    }
    let mut arc: u64 = 0;
    for &b in rest {
        if arc > u64::MAX >> 7 {
            return None;
        }
        arc = (arc << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            arcs.push(arc);
            arc = 0;
        }
    }
    (rest.last().is_none_or(|b| b & 0x80 == 0)).then_some(arcs)
}

/// A cursor over DER elements with single-byte tags and definite lengths.
struct Der<'a>(&'a [u8]);

impl<'a> Der<'a> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The next element's tag and content; `Some(None)` at the end, `None` if the bytes
    /// are not DER this reader takes.
    fn next(&mut self) -> Option<Option<(u8, &'a [u8])>> {
        let Some((&tag, rest)) = self.0.split_first() else {
            return Some(None);
        };
        if tag & 0x1f == 0x1f {
            return None; // high tag numbers: not used in certificates
        }
        let (&first, mut rest) = rest.split_first()?;
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            let count = usize::from(first & 0x7f);
            if count == 0 || count > 4 || count > rest.len() {
                return None; // indefinite (not DER) or longer than any certificate
            }
            let (bytes, tail) = rest.split_at(count);
            rest = tail;
            bytes.iter().fold(0usize, |n, &b| (n << 8) | usize::from(b))
        };
        if len > rest.len() {
            return None;
        }
        let (content, tail) = rest.split_at(len);
        self.0 = tail;
        Some(Some((tag, content)))
    }

    /// The content of the next element, which must have `tag`.
    fn expect(&mut self, tag: u8) -> Option<&'a [u8]> {
        match self.next()? {
            Some((t, content)) if t == tag => Some(content),
            _ => None,
        }
    }

    /// Skips the next element if it has `tag` (an optional field).
    fn skip_if(&mut self, tag: u8) -> Option<()> {
        let before = self.0;
        if let Some((t, _)) = self.next()?
            && t != tag
        {
            self.0 = before;
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    use rustls::pki_types::CertificateDer;

    fn ca_with(name: DistinguishedName, key_id: Option<Vec<u8>>) -> (Vec<u8>, KeyPair) {
        let mut params = CertificateParams::default();
        params.distinguished_name = name;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        if let Some(id) = key_id {
            params.key_identifier_method = KeyIdMethod::PreSpecified(id);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.der().to_vec(), key)
    }

    /// Issues a leaf under the CA read back from `ca_der` and checks it names the CA
    /// as webpki reads it: issuer bytes equal to the CA's subject bytes.
    fn issue_under(ca_der: &[u8], key: KeyPair) -> Vec<u8> {
        let identity = read_ca_identity(ca_der).expect("a readable CA");
        let mut issuer_params = CertificateParams::default();
        issuer_params.distinguished_name = identity.name;
        issuer_params.key_identifier_method = identity.key_id;
        let issuer = Issuer::new(issuer_params, key);
        let leaf_key = KeyPair::generate().unwrap();
        let mut leaf_params = CertificateParams::new(vec!["leaf.example".to_owned()]).unwrap();
        leaf_params.use_authority_key_identifier_extension = true;
        let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
        let ca = CertificateDer::from(ca_der.to_vec());
        let ca = webpki::EndEntityCert::try_from(&ca).unwrap();
        let leaf_der = CertificateDer::from(leaf.der().to_vec());
        let leaf_cert = webpki::EndEntityCert::try_from(&leaf_der).unwrap();
        assert_eq!(leaf_cert.issuer(), ca.subject());
        leaf.der().to_vec()
    }

    /// The value of the extension `oid` (DER content) in a certificate.
    fn extension(cert: &[u8], oid: &[u8]) -> Option<Vec<u8>> {
        cert.windows(oid.len() + 2)
            .position(|w| w[0] == OID && usize::from(w[1]) == oid.len() && &w[2..] == oid)
            .map(|at| {
                let mut rest = Der(&cert[at..]);
                rest.expect(OID).unwrap();
                rest.skip_if(BOOLEAN).unwrap();
                rest.expect(OCTET_STRING).unwrap().to_vec()
            })
    }

    #[test]
    fn names_of_every_string_type_come_back_byte_for_byte() {
        let mut name = DistinguishedName::new();
        name.push(
            DnType::CountryName,
            DnValue::PrintableString("DE".try_into().unwrap()),
        );
        name.push(DnType::OrganizationName, "Ünïcode Org");
        name.push(
            DnType::OrganizationalUnitName,
            DnValue::BmpString(BmpString::from_utf16be(vec![0, b'o', 0, b'u']).unwrap()),
        );
        name.push(
            DnType::CustomDnType(vec![1, 2, 840, 113549, 1, 9, 1]),
            DnValue::Ia5String("ca@example.com".try_into().unwrap()),
        );
        name.push(DnType::CommonName, "test CA");
        let (der, key) = ca_with(name, None);
        issue_under(&der, key);
    }

    #[test]
    fn the_authority_key_id_is_the_cas_subject_key_id() {
        let oid_aki = [0x55, 0x1d, 0x23];
        // rcgen's own CA (a SHA-256 key id) and a CA with a foreign 20-byte key id.
        for key_id in [None, Some((1..=20).collect::<Vec<u8>>())] {
            let mut name = DistinguishedName::new();
            name.push(DnType::CommonName, "kid CA");
            let (der, key) = ca_with(name, key_id);
            let ski = extension(&der, SUBJECT_KEY_ID).unwrap();
            let leaf = issue_under(&der, key);
            let aki = extension(&leaf, &oid_aki).unwrap();
            // AuthorityKeyIdentifier ::= SEQUENCE { [0] keyIdentifier, .. }
            let mut seq = Der(&aki);
            let mut inner = Der(seq.expect(SEQUENCE).unwrap());
            let mut ski_inner = Der(&ski);
            assert_eq!(
                inner.expect(0x80).unwrap(),
                ski_inner.expect(OCTET_STRING).unwrap()
            );
        }
    }

    #[test]
    fn truncated_or_damaged_certificates_are_refused_without_panicking() {
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, "cut CA");
        let (der, _) = ca_with(name, None);
        for len in 0..der.len() {
            assert!(read_ca_identity(&der[..len]).is_none(), "prefix of {len}");
        }
        for at in 0..der.len() {
            for byte in [0x00, 0x1f, 0x80, 0x84, 0xff] {
                let mut bad = der.clone();
                bad[at] = byte;
                let _ = read_ca_identity(&bad);
            }
        }
        // A length field claiming more than the input holds.
        assert!(read_ca_identity(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]).is_none());
    }

    /// A leaf valid from `not_before` to `not_after` (Unix seconds) with `ekus`.
    fn leaf(not_before: i64, not_after: i64, ekus: Vec<rcgen::ExtendedKeyUsagePurpose>) -> Vec<u8> {
        let mut params = CertificateParams::new(vec!["leaf.example".to_owned()]).unwrap();
        params.not_before = time::OffsetDateTime::from_unix_timestamp(not_before).unwrap();
        params.not_after = time::OffsetDateTime::from_unix_timestamp(not_after).unwrap();
        params.extended_key_usages = ekus;
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn end_entity_dates_and_server_auth_are_read() {
        use rcgen::ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
        // 1999-12-31T23:59:59Z and 2049-12-31T23:59:59Z are UTCTime (19xx and 20xx);
        // 2050-01-01T00:00:00Z and later are GeneralizedTime.
        let cases = [
            (946_684_799, 2_524_607_999),
            (1_700_000_000, 2_524_608_000),
            (2_524_608_000, 253_402_300_799),
        ];
        for (not_before, not_after) in cases {
            let der = leaf(not_before, not_after, vec![ClientAuth, ServerAuth]);
            assert_eq!(
                read_end_entity_facts(&der),
                Some(EndEntityFacts {
                    not_before,
                    not_after,
                    server_auth: Some(true),
                })
            );
        }
        let der = leaf(0, 1, vec![ClientAuth]);
        assert_eq!(
            read_end_entity_facts(&der).unwrap().server_auth,
            Some(false)
        );
        let der = leaf(0, 1, vec![]);
        assert_eq!(read_end_entity_facts(&der).unwrap().server_auth, None);

        for len in 0..der.len() {
            assert!(
                read_end_entity_facts(&der[..len]).is_none(),
                "prefix of {len}"
            );
        }
        for at in 0..der.len() {
            for byte in [0x00, 0x1f, 0x80, 0x84, 0xff, b'9'] {
                let mut bad = der.clone();
                bad[at] = byte;
                let _ = read_end_entity_facts(&bad);
            }
        }
    }

    #[test]
    fn times_out_of_range_are_refused() {
        let time = |tag: u8, text: &str| {
            let mut der = vec![tag, u8::try_from(text.len()).unwrap()];
            der.extend_from_slice(text.as_bytes());
            read_time(&mut Der(&der))
        };
        assert_eq!(time(UTC_TIME, "700101000000Z"), Some(0));
        assert_eq!(time(GENERALIZED_TIME, "19700101000000Z"), Some(0));
        assert_eq!(time(UTC_TIME, "491231235959Z"), Some(2_524_607_999));
        for bad in [
            "701301000000Z",
            "700132000000Z",
            "700101240000Z",
            "700101006000Z",
            "700101000000+",
            "70010100000-Z",
            "7001010000Z",
        ] {
            assert_eq!(time(UTC_TIME, bad), None, "{bad}");
        }
        assert_eq!(time(GENERALIZED_TIME, "700101000000Z"), None);
        assert_eq!(time(0x04, "700101000000Z"), None);
    }

    #[test]
    fn oids_decode_to_their_arcs() {
        assert_eq!(oid_arcs(&[0x55, 0x04, 0x03]), Some(vec![2, 5, 4, 3]));
        assert_eq!(
            oid_arcs(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01]),
            Some(vec![1, 2, 840, 113549, 1, 9, 1])
        );
        assert_eq!(oid_arcs(&[0x2a, 0x86]), None);
        assert_eq!(oid_arcs(&[]), None);
    }
}
