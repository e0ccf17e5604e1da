package main

import (
	"os"
	"path/filepath"
	"testing"
)

// An export file resumes after its last whole entry; a half-written line is
// cut, and a file that is not an export is left alone.
func TestOpenExport(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "l.jsonl")
	f, last, _, err := openExport(path)
	if err != nil || last != "" {
		t.Fatalf("new file: %q %v", last, err)
	}
	f.WriteString(`{"id":"5-0","request_id":"a"}` + "\n" + `{"id":"7-1","request_id":"b","account_id":"acct_1"}` + "\n" + `{"id":"9-`)
	f.Close()
	f, last, owner, err := openExport(path)
	if err != nil || last != "7-1" || owner != "acct_1" {
		t.Fatalf("resume: %q %q %v", last, owner, err)
	}
	f.WriteString(`{"id":"8-0"}` + "\n")
	f.Close()
	b, _ := os.ReadFile(path)
	if want := `{"id":"5-0","request_id":"a"}` + "\n" + `{"id":"7-1","request_id":"b","account_id":"acct_1"}` + "\n" + `{"id":"8-0"}` + "\n"; string(b) != want {
		t.Fatalf("file after resume:\n%s", b)
	}
	other := filepath.Join(dir, "notes.txt")
	os.WriteFile(other, []byte("hello\n"), 0o600)
	if _, _, _, err := openExport(other); err == nil {
		t.Fatal("appended to a file that is not an export")
	}
}
