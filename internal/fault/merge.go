package fault

// ErrSilverMergeFailing: the merges of one silver table failed the same way
// a bounded number of times in a row (silver.DefaultMaxFailures), with an
// error that is not marked transient. Retrying further would only repeat
// it: tidemark stops with the table, the cause and the fix. Bronze keeps
// every change; once the cause is fixed, the next merge catches up.
var ErrSilverMergeFailing = &Error{Class: Fatal, Code: "silver_merge_failing"}
