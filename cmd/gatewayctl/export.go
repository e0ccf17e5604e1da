package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

// lineOptions print one ledger entry per line, every field present.
var lineOptions = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

func (a *app) ledgerExportCmd() *cobra.Command {
	var (
		out      string
		pageSize int32
		noCommit bool
	)
	cmd := &cobra.Command{
		Use:   "export ACCOUNT_ID",
		Short: "Export an account's ledger as JSON lines, resuming where the last export ended",
		Long: `Export writes the account's ledger entries, oldest first, one JSON object a
line, and commits each page as exported once it is written (and, with --out,
synced to disk). Only committed entries are ever trimmed from the ledger (by
the gateway's store.ledger_retention).

With --out FILE the export appends to FILE and resumes after the last entry
in it (an incomplete last line, left by a crash, is cut first), so FILE holds
every entry exactly once however often the export stops and restarts.
Without --out it writes to standard output and resumes after the last
committed entry.`,
		Args: cobra.ExactArgs(1),
	}
	cmd.Flags().StringVar(&out, "out", "", "append to this file and resume after its last entry")
	cmd.Flags().Int32Var(&pageSize, "page-size", 1000, "entries per call (at most 1000)")
	cmd.Flags().BoolVar(&noCommit, "no-commit", false, "do not record the export (nothing becomes trimmable)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		account := args[0]
		w := a.stdout
		after := ""
		var sync func() error
		if out != "" {
			f, last, owner, err := openExport(out)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := a.checkExportOwner(cmd, out, account, last, owner); err != nil {
				return err
			}
			w, after, sync = f, last, f.Sync
		}
		n, last, err := a.export(cmd, account, after, pageSize, !noCommit, w, sync)
		if n > 0 {
			fmt.Fprintf(a.stderr, "exported %d entries of %s through %s\n", n, account, last)
		} else if err == nil {
			fmt.Fprintf(a.stderr, "nothing new to export for %s\n", account)
		}
		return err
	}
	return cmd
}

// export copies pages after the cursor to w, committing each once written.
func (a *app) export(cmd *cobra.Command, account, after string, size int32, commit bool, w io.Writer, sync func() error) (n int, last string, err error) {
	call := func(f func(ctx context.Context) error) error {
		ctx, cancel, err := a.call(cmd)
		if err != nil {
			return err
		}
		defer cancel()
		return f(ctx)
	}
	bw := bufio.NewWriter(w)
	for {
		var page *adminv1.ExportLedgerResponse
		err := call(func(ctx context.Context) (err error) {
			page, err = a.client.ExportLedger(ctx, &adminv1.ExportLedgerRequest{AccountId: account, PageSize: size, After: after})
			return err
		})
		if err != nil {
			return n, last, err
		}
		if len(page.Entries) == 0 {
			return n, last, nil
		}
		for _, e := range page.Entries {
			b, err := lineOptions.Marshal(e)
			if err != nil {
				return n, last, err
			}
			bw.Write(b)
			bw.WriteByte('\n')
		}
		if err := bw.Flush(); err != nil {
			return n, last, fmt.Errorf("writing the export: %w", err)
		}
		if sync != nil {
			if err := sync(); err != nil {
				return n, last, fmt.Errorf("writing the export: %w", err)
			}
		}
		n += len(page.Entries)
		last = page.Entries[len(page.Entries)-1].GetId()
		after = last
		if commit {
			err := call(func(ctx context.Context) error {
				_, err := a.client.CommitLedgerExport(ctx, &adminv1.CommitLedgerExportRequest{AccountId: account, LastId: last})
				return err
			})
			if err != nil {
				return n, last, err
			}
		}
	}
}

// checkExportOwner refuses to resume an export file of another account: its
// last entry's id would skip (and, once committed, let the store trim) the
// account's entries never exported. A last line that names no account
// (written before entries named theirs) is taken only when its id is the
// account's committed export mark.
func (a *app) checkExportOwner(cmd *cobra.Command, path, account, last, owner string) error {
	switch {
	case last == "" || owner == account:
		return nil
	case owner != "":
		return fmt.Errorf("%s holds the ledger of account %s, not %s; export each account to its own file", path, owner, account)
	}
	ctx, cancel, err := a.call(cmd)
	if err != nil {
		return err
	}
	defer cancel()
	page, err := a.client.ExportLedger(ctx, &adminv1.ExportLedgerRequest{AccountId: account, PageSize: 1})
	if err != nil {
		return err
	}
	if page.GetMark() != last {
		return fmt.Errorf("%s does not say which account it holds and its last entry %s is not the export mark of %s; export to a new file", path, last, account)
	}
	return nil
}

// openExport opens (or creates) an export file for appending and returns the
// id of its last complete entry and the account it names, "" when it has
// none. A partial last line is cut off first.
func openExport(path string) (f *os.File, last, account string, err error) {
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, "", "", err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, "", "", err
	}
	end := bytes.LastIndexByte(b, '\n') + 1
	if end < len(b) {
		if err := f.Truncate(int64(end)); err != nil {
			f.Close()
			return nil, "", "", err
		}
	}
	if _, err := f.Seek(int64(end), io.SeekStart); err != nil {
		f.Close()
		return nil, "", "", err
	}
	if end == 0 {
		return f, "", "", nil
	}
	lines := bytes.Split(bytes.TrimRight(b[:end], "\n"), []byte("\n"))
	var e struct {
		ID      string `json:"id"`
		Account string `json:"account_id"`
	}
	if err := json.Unmarshal(lines[len(lines)-1], &e); err != nil || e.ID == "" {
		f.Close()
		return nil, "", "", errors.New(path + ": the last line is not a ledger entry; not appending to it")
	}
	return f, e.ID, e.Account, nil
}
