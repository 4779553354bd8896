// Package myverify is MySQL's and MariaDB's verify.Source: it reads the
// source with the capture's Mapping (SelectExpr, DecodeText) and
// SnapshotPosition, and computes chunk hashes in SQL (myCanon, the twin of
// verify's canon.go) where it can. It lives with the source so that package
// verify imports no source (issue 13); only the composition root
// (internal/app) constructs it (New, NewWith).
package myverify
