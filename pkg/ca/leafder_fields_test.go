package ca

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"math/big"
	"net"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

// How createLeaf treats a field of an x509.Certificate template.
const (
	// fieldEncoded: marshalLeafTBS encodes it as x509.CreateCertificate does.
	fieldEncoded = "encoded"
	// fieldRefused: encodableLeaf refuses a template that sets it, which
	// then goes to x509.CreateCertificate.
	fieldRefused = "refused"
	// fieldIgnored: x509.CreateCertificate does not read it from a
	// template either.
	fieldIgnored = "ignored"
)

// leafField is what createLeaf does with one field of the template, why,
// and how to set it, for the test to hold the encoder to it.
type leafField struct {
	how    string
	reason string
	set    func(*x509.Certificate)
}

// leafTemplateFields lists every field of x509.Certificate. A field Go adds
// is missing here, and TestLeafEncoderKnowsEveryCertificateField fails
// until it is listed, so that no field x509.CreateCertificate encodes is
// silently dropped by createLeaf.
var leafTemplateFields = map[string]leafField{
	"SerialNumber":          {fieldEncoded, "the leaf's serial", func(c *x509.Certificate) { c.SerialNumber = big.NewInt(424242) }},
	"NotBefore":             {fieldEncoded, "validity", func(c *x509.Certificate) { c.NotBefore = c.NotBefore.Add(-time.Hour) }},
	"NotAfter":              {fieldEncoded, "validity", func(c *x509.Certificate) { c.NotAfter = c.NotAfter.Add(time.Hour) }},
	"KeyUsage":              {fieldEncoded, "the key usage extension", func(c *x509.Certificate) { c.KeyUsage |= x509.KeyUsageKeyAgreement }},
	"ExtKeyUsage":           {fieldEncoded, "serverAuth and clientAuth; any other usage is refused", func(c *x509.Certificate) { c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth} }},
	"BasicConstraintsValid": {fieldEncoded, "basic constraints of an end entity; a template without them is refused", func(c *x509.Certificate) { c.BasicConstraintsValid = true }},
	"AuthorityKeyId":        {fieldEncoded, "the parent's subject key ID wins, as in x509.CreateCertificate", func(c *x509.Certificate) { c.AuthorityKeyId = []byte{1, 2, 3} }},
	"DNSNames":              {fieldEncoded, "subject alternative names", func(c *x509.Certificate) { c.DNSNames = []string{"istiod.istio-system.svc"} }},
	"URIs":                  {fieldEncoded, "subject alternative names", func(c *x509.Certificate) { c.URIs = []*url.URL{testID("other", "sa").URL()} }},

	"RawSubject":         {fieldRefused, "a leaf's subject is empty", func(c *x509.Certificate) { c.RawSubject = []byte{0x30, 0} }},
	"Subject":            {fieldRefused, "a leaf's subject is empty", func(c *x509.Certificate) { c.Subject = pkix.Name{CommonName: "x"} }},
	"SubjectKeyId":       {fieldRefused, "not in a leaf", func(c *x509.Certificate) { c.SubjectKeyId = []byte{1} }},
	"IsCA":               {fieldRefused, "a leaf is no CA", func(c *x509.Certificate) { c.IsCA = true }},
	"MaxPathLen":         {fieldRefused, "CA only", func(c *x509.Certificate) { c.MaxPathLen = 1 }},
	"MaxPathLenZero":     {fieldRefused, "CA only", func(c *x509.Certificate) { c.MaxPathLenZero = true }},
	"EmailAddresses":     {fieldRefused, "not a workload name", func(c *x509.Certificate) { c.EmailAddresses = []string{"a@example.com"} }},
	"IPAddresses":        {fieldRefused, "not a workload name", func(c *x509.Certificate) { c.IPAddresses = []net.IP{net.IPv4(10, 0, 0, 1)} }},
	"UnknownExtKeyUsage": {fieldRefused, "only serverAuth and clientAuth are encoded", func(c *x509.Certificate) { c.UnknownExtKeyUsage = []asn1.ObjectIdentifier{{1, 2, 3}} }},
	"ExtraExtensions": {fieldRefused, "arbitrary extensions", func(c *x509.Certificate) {
		c.ExtraExtensions = []pkix.Extension{{Id: asn1.ObjectIdentifier{1, 2, 3}, Value: []byte{5, 0}}}
	}},
	"OCSPServer":                  {fieldRefused, "authority information access", func(c *x509.Certificate) { c.OCSPServer = []string{"http://ocsp.example"} }},
	"IssuingCertificateURL":       {fieldRefused, "authority information access", func(c *x509.Certificate) { c.IssuingCertificateURL = []string{"http://ca.example"} }},
	"CRLDistributionPoints":       {fieldRefused, "CRL distribution points", func(c *x509.Certificate) { c.CRLDistributionPoints = []string{"http://crl.example"} }},
	"PolicyIdentifiers":           {fieldRefused, "certificate policies", func(c *x509.Certificate) { c.PolicyIdentifiers = []asn1.ObjectIdentifier{{1, 2, 3}} }},
	"Policies":                    {fieldRefused, "certificate policies", func(c *x509.Certificate) { c.Policies = []x509.OID{mustOID(1, 2, 3)} }},
	"PermittedDNSDomainsCritical": {fieldRefused, "name constraints are a CA's", func(c *x509.Certificate) { c.PermittedDNSDomainsCritical = true }},
	"PermittedDNSDomains":         {fieldRefused, "name constraints are a CA's", func(c *x509.Certificate) { c.PermittedDNSDomains = []string{"example.com"} }},
	"ExcludedDNSDomains":          {fieldRefused, "name constraints are a CA's", func(c *x509.Certificate) { c.ExcludedDNSDomains = []string{"example.com"} }},
	"PermittedIPRanges": {fieldRefused, "name constraints are a CA's", func(c *x509.Certificate) {
		c.PermittedIPRanges = []*net.IPNet{{IP: net.IPv4(10, 0, 0, 0), Mask: net.CIDRMask(8, 32)}}
	}},
	"ExcludedIPRanges": {fieldRefused, "name constraints are a CA's", func(c *x509.Certificate) {
		c.ExcludedIPRanges = []*net.IPNet{{IP: net.IPv4(10, 0, 0, 0), Mask: net.CIDRMask(8, 32)}}
	}},
	"PermittedEmailAddresses": {fieldRefused, "name constraints are a CA's", func(c *x509.Certificate) { c.PermittedEmailAddresses = []string{"example.com"} }},
	"ExcludedEmailAddresses":  {fieldRefused, "name constraints are a CA's", func(c *x509.Certificate) { c.ExcludedEmailAddresses = []string{"example.com"} }},
	"PermittedURIDomains":     {fieldRefused, "name constraints are a CA's", func(c *x509.Certificate) { c.PermittedURIDomains = []string{"example.com"} }},
	"ExcludedURIDomains":      {fieldRefused, "name constraints are a CA's", func(c *x509.Certificate) { c.ExcludedURIDomains = []string{"example.com"} }},
	"SignatureAlgorithm":      {fieldRefused, "the algorithm is the signing key's", func(c *x509.Certificate) { c.SignatureAlgorithm = x509.ECDSAWithSHA384 }},

	"Raw":                     {fieldIgnored, "output of parsing", func(c *x509.Certificate) { c.Raw = []byte{1} }},
	"RawTBSCertificate":       {fieldIgnored, "output of parsing", func(c *x509.Certificate) { c.RawTBSCertificate = []byte{1} }},
	"RawSubjectPublicKeyInfo": {fieldIgnored, "output of parsing; the key is an argument", func(c *x509.Certificate) { c.RawSubjectPublicKeyInfo = []byte{1} }},
	"RawIssuer":               {fieldIgnored, "the issuer is the parent's subject", func(c *x509.Certificate) { c.RawIssuer = []byte{0x30, 0} }},
	"Signature":               {fieldIgnored, "output of signing", func(c *x509.Certificate) { c.Signature = []byte{1} }},
	"PublicKeyAlgorithm":      {fieldIgnored, "the key is an argument", func(c *x509.Certificate) { c.PublicKeyAlgorithm = x509.RSA }},
	"PublicKey":               {fieldIgnored, "the key is an argument", func(c *x509.Certificate) { c.PublicKey = rsa2048().Public() }},
	"Version":                 {fieldIgnored, "always version 3", func(c *x509.Certificate) { c.Version = 1 }},
	"Issuer":                  {fieldIgnored, "the issuer is the parent's subject", func(c *x509.Certificate) { c.Issuer = pkix.Name{CommonName: "x"} }},
	"Extensions": {fieldIgnored, "output of parsing; ExtraExtensions is the input", func(c *x509.Certificate) {
		c.Extensions = []pkix.Extension{{Id: asn1.ObjectIdentifier{1, 2, 3}, Value: []byte{5, 0}}}
	}},
	"UnhandledCriticalExtensions": {fieldIgnored, "output of parsing", func(c *x509.Certificate) { c.UnhandledCriticalExtensions = []asn1.ObjectIdentifier{{1, 2, 3}} }},
	"InhibitAnyPolicy":            {fieldIgnored, "output of parsing (policy constraints)", func(c *x509.Certificate) { c.InhibitAnyPolicy = 1 }},
	"InhibitAnyPolicyZero":        {fieldIgnored, "output of parsing (policy constraints)", func(c *x509.Certificate) { c.InhibitAnyPolicyZero = true }},
	"InhibitPolicyMapping":        {fieldIgnored, "output of parsing (policy constraints)", func(c *x509.Certificate) { c.InhibitPolicyMapping = 1 }},
	"InhibitPolicyMappingZero":    {fieldIgnored, "output of parsing (policy constraints)", func(c *x509.Certificate) { c.InhibitPolicyMappingZero = true }},
	"RequireExplicitPolicy":       {fieldIgnored, "output of parsing (policy constraints)", func(c *x509.Certificate) { c.RequireExplicitPolicy = 1 }},
	"RequireExplicitPolicyZero":   {fieldIgnored, "output of parsing (policy constraints)", func(c *x509.Certificate) { c.RequireExplicitPolicyZero = true }},
	"PolicyMappings": {fieldIgnored, "output of parsing (policy mappings)", func(c *x509.Certificate) {
		c.PolicyMappings = []x509.PolicyMapping{{IssuerDomainPolicy: mustOID(1, 2, 3), SubjectDomainPolicy: mustOID(1, 2, 4)}}
	}},
}

func mustOID(ints ...uint64) x509.OID {
	oid, err := x509.OIDFromInts(ints)
	if err != nil {
		panic(err)
	}
	return oid
}

// Every field of x509.Certificate is listed with what createLeaf does with
// it, and does that: an encoded or ignored field, set, leaves createLeaf
// byte-equal to x509.CreateCertificate; a refused one sends the template
// to x509.CreateCertificate.
func TestLeafEncoderKnowsEveryCertificateField(t *testing.T) {
	fields := reflect.TypeFor[x509.Certificate]()
	known := map[string]bool{}
	for f := range fields.Fields() {
		known[f.Name] = true
		if _, ok := leafTemplateFields[f.Name]; !ok {
			t.Errorf("x509.Certificate.%s is new to the leaf encoder: list it in leafTemplateFields, "+
				"and refuse it in encodableLeaf or encode it in marshalLeafTBS if x509.CreateCertificate reads it", f.Name)
		}
	}
	a := derAuthority(t, catest.NewKey(t))
	pub := catest.NewKey(t).Public()
	now := time.Now()
	for name, f := range leafTemplateFields {
		t.Run(name, func(t *testing.T) {
			if !known[name] {
				t.Fatalf("x509.Certificate has no field %s", name)
			}
			if f.reason == "" {
				t.Errorf("no reason given for how %s is treated", name)
			}
			tmpl := leafTemplate(a, newSerial(), now, now.Add(time.Hour), nil, testID("ns", "sa").URL())
			f.set(tmpl)
			switch f.how {
			case fieldEncoded, fieldIgnored:
				matchesStdlib(t, a, tmpl, pub)
			case fieldRefused:
				if _, err := marshalLeafTBS(tmpl, a.cert, a.leafSigner.algorithm, pub); err != errNotEncodable {
					t.Fatalf("a template with %s set: %v, want errNotEncodable", name, err)
				}
			default:
				t.Fatalf("unknown treatment %q", f.how)
			}
		})
	}
}
