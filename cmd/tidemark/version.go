package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version and commit are set at build time for a release (make build sets
// both from git):
//
//	go build -ldflags "-X main.version=v1.2.0 -X main.commit=$(git rev-parse HEAD)" ./cmd/tidemark
//
// Unset, the version is the module version Go recorded (go install
// ...@v1.2.0), else "dev", and the commit is the one Go stamped into the
// binary (vcs.revision; Go stamps none in a git worktree or with
// -buildvcs=false).
var version, commit string

// versionString is what --version and `tidemark version` print.
func versionString() string {
	bi, _ := debug.ReadBuildInfo()
	return describeVersion(version, commit, bi)
}

// describeVersion prints the version, the commit ("+dirty" when the tree
// had uncommitted changes: vcs.modified) and the Go version and platform.
func describeVersion(version, commit string, bi *debug.BuildInfo) string {
	dirty := false
	if bi != nil {
		if version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			version = bi.Main.Version
		}
		if commit == "" { // -X main.commit wins: it says dirty itself
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					commit = s.Value
				case "vcs.modified":
					dirty = s.Value == "true"
				}
			}
		}
	}
	if version == "" {
		version = "dev"
	}
	if commit == "" {
		commit = "unknown (built without version control information; make build sets it)"
	} else if dirty {
		commit += "+dirty"
	}
	return fmt.Sprintf("tidemark %s\ncommit %s\n%s %s/%s", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the commit it was built from, and the Go version",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), versionString())
			return err
		},
	}
}
