// Package pgverify is PostgreSQL's verify.Source: it reads the source in
// SQL with the capture's Dialer and typemap decoding, and computes chunk
// hashes in SQL (sqlcanon.go, the twin of verify's canon.go). It lives with
// the source so that package verify imports no source (issue 13); only the
// composition root (internal/app) constructs it (New, NewWith).
package pgverify
