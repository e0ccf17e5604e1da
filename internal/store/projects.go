package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/ledger"
)

// Projects group an account's keys under limits of their own. A project is
// the hash gw:{acct:ID}:proj:PROJECTID (name, created, limits as a key's),
// listed in the set gw:{acct:ID}:projects; its keys' ids are the set
// gw:{acct:ID}:pkeys:PROJECTID, and a key names its project in its "project"
// field. A key that names none is in the account's default project, which
// is not stored: it has no limits (the account's apply), and its spend is
// the account's less that of the other projects. A project's in-flight
// counts and spend are its state, gw:{acct:ID}:ps:PROJECTID, kept as a
// key's is (admit.lua, settle.lua).

// ErrProjectHasKeys is returned when deleting a project that still has keys.
var ErrProjectHasKeys = errors.New("project still has keys: move them first")

// ErrDefaultProject is returned for what the default project cannot do:
// have limits of its own, or be deleted.
var ErrDefaultProject = errors.New("the default project has no limits of its own and cannot be deleted: create a project and move keys to it")

// maxProjectName bounds a project's name, in characters.
const maxProjectName = 100

// checkProjectLimits is CheckLimits for a project: a concurrency wait is a
// key's choice only.
func checkProjectLimits(l account.Limits) error {
	if l.ConcurrencyWaitSeconds != 0 {
		return errors.New("a project has no concurrency wait (a key's is its own)")
	}
	return CheckLimits(l)
}

func checkProjectName(name string) error {
	if name == "" || !utf8.ValidString(name) || utf8.RuneCountInString(name) > maxProjectName {
		return fmt.Errorf("a project's name must be 1 to %d characters of UTF-8", maxProjectName)
	}
	return nil
}

// projectLimitFields are the hash fields of a project's limits: a key's,
// without the concurrency wait.
func projectLimitFields(l account.Limits) []any {
	return append(limitFields(l), "total", strconv.FormatInt(l.TotalNanoUSD, 10))
}

// CreateProject makes a project in the account.
func (s *Store) CreateProject(ctx context.Context, accountID, name string, l account.Limits) (account.Project, error) {
	if err := checkProjectName(name); err != nil {
		return account.Project{}, fmt.Errorf("store: create project: %w", err)
	}
	if err := checkProjectLimits(l); err != nil {
		return account.Project{}, fmt.Errorf("store: create project: %w", err)
	}
	if !validID(accountID) {
		return account.Project{}, fmt.Errorf("store: create project in %q: %w", accountID, ErrNotFound)
	}
	p := account.Project{ID: newID("prj_"), AccountID: accountID, Name: name, Limits: l, CreatedAt: s.now().Truncate(time.Millisecond)}
	fields := append([]any{"name", name, "created", ms(p.CreatedAt)}, projectLimitFields(l)...)
	// The account's existence is checked in the transaction's slot: a
	// project is never made for a missing account.
	acct := acctKey(accountID, "acct")
	err := s.rdb.Watch(ctx, func(tx *redis.Tx) error {
		n, err := tx.Exists(ctx, acct).Result()
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrNotFound
		}
		_, err = tx.TxPipelined(ctx, func(pl redis.Pipeliner) error {
			pl.HSet(ctx, acctKey(accountID, "proj:"+p.ID), fields...)
			pl.SAdd(ctx, acctKey(accountID, "projects"), p.ID)
			return nil
		})
		return err
	}, acct)
	if err != nil {
		return account.Project{}, fmt.Errorf("store: create project in %s: %w", accountID, err)
	}
	return p, nil
}

// decodeProject builds a Project from its hash; ok is false when it is empty.
func decodeProject(accountID, id string, m map[string]string) (account.Project, bool) {
	if len(m) == 0 {
		return account.Project{}, false
	}
	return account.Project{
		ID: id, AccountID: accountID, Name: m["name"], CreatedAt: parseMS(m["created"]),
		Limits: decodeHashLimits(m),
	}, true
}

// defaultProject is the account's implicit project.
func defaultProject(accountID string) account.Project {
	return account.Project{ID: account.DefaultProject, AccountID: accountID, Name: account.DefaultProject}
}

// Project returns the account's project id; the default project always
// exists.
func (s *Store) Project(ctx context.Context, accountID, id string) (account.Project, error) {
	if !validID(accountID) || !validID(id) {
		return account.Project{}, fmt.Errorf("store: project %q of %q: %w", id, accountID, ErrNotFound)
	}
	if id == account.DefaultProject {
		if _, err := s.Account(ctx, accountID); err != nil {
			return account.Project{}, err
		}
		return defaultProject(accountID), nil
	}
	m, err := s.rdb.HGetAll(ctx, acctKey(accountID, "proj:"+id)).Result()
	if err != nil {
		return account.Project{}, fmt.Errorf("store: project %s of %s: %w", id, accountID, err)
	}
	p, ok := decodeProject(accountID, id, m)
	if !ok {
		return account.Project{}, fmt.Errorf("store: project %s of %s: %w", id, accountID, ErrNotFound)
	}
	return p, nil
}

// ListProjects returns the account's projects, the default one first, then
// the others oldest first.
func (s *Store) ListProjects(ctx context.Context, accountID string) ([]account.Project, error) {
	if !validID(accountID) {
		return nil, fmt.Errorf("store: list projects of %q: %w", accountID, ErrNotFound)
	}
	ids, hashes, err := s.members(ctx, accountID, "projects", "proj:")
	if err != nil {
		return nil, fmt.Errorf("store: list projects of %s: %w", accountID, err)
	}
	out := make([]account.Project, 0, len(ids)+1)
	for i, id := range ids {
		if p, ok := decodeProject(accountID, id, hashes[i]); ok {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b account.Project) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return append([]account.Project{defaultProject(accountID)}, out...), nil
}

// SetProjectLimits replaces the limits of the account's project id. The
// sidecars see them within the key cache's lifetime; what the project has
// spent and has in flight stays counted.
func (s *Store) SetProjectLimits(ctx context.Context, accountID, id string, l account.Limits) error {
	if id == account.DefaultProject {
		return fmt.Errorf("store: set limits of project %s: %w", id, ErrDefaultProject)
	}
	if !validID(accountID) || !validID(id) {
		return fmt.Errorf("store: set limits of project %q of %q: %w", id, accountID, ErrNotFound)
	}
	if err := checkProjectLimits(l); err != nil {
		return fmt.Errorf("store: set limits of project %s: %w", id, err)
	}
	n, err := hsetxScript.Run(ctx, s.rdb, []string{acctKey(accountID, "proj:"+id)}, projectLimitFields(l)...).Int64()
	if err != nil {
		return fmt.Errorf("store: set limits of project %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("store: set limits of project %s of %s: %w", id, accountID, ErrNotFound)
	}
	return nil
}

// DeleteProject deletes the account's project id, which must have no keys
// (revoked ones included: move them first). Its state (spend) is kept
// until its windows lapse, as a revoked key's is.
func (s *Store) DeleteProject(ctx context.Context, accountID, id string) error {
	if id == account.DefaultProject {
		return fmt.Errorf("store: delete project %s: %w", id, ErrDefaultProject)
	}
	if !validID(accountID) || !validID(id) {
		return fmt.Errorf("store: delete project %q of %q: %w", id, accountID, ErrNotFound)
	}
	n, err := projectScript.Run(ctx, s.rdb,
		[]string{acctKey(accountID, "proj:"+id), acctKey(accountID, "projects"), acctKey(accountID, "pkeys:"+id)},
		"delete", id).Int64()
	switch {
	case err != nil:
		return fmt.Errorf("store: delete project %s of %s: %w", id, accountID, err)
	case n == -1:
		return fmt.Errorf("store: delete project %s of %s: %w", id, accountID, ErrNotFound)
	case n == -2:
		return fmt.Errorf("store: delete project %s of %s: %w", id, accountID, ErrProjectHasKeys)
	}
	return nil
}

// MoveKey moves the account's key keyID to project projectID (the default
// project: account.DefaultProject or ""). Only its future requests count
// against the new project: what it spent stays with the old one, and a
// request in flight settles against the project it was admitted under.
func (s *Store) MoveKey(ctx context.Context, accountID, keyID, projectID string) error {
	if projectID == account.DefaultProject {
		projectID = ""
	}
	if !validID(accountID) || !validID(keyID) || projectID != "" && !validID(projectID) {
		return fmt.Errorf("store: move key %q of %q to %q: %w", keyID, accountID, projectID, ErrNotFound)
	}
	meta := acctKey(accountID, "key:"+keyID)
	for range 8 {
		cur, err := s.rdb.HGet(ctx, meta, "project").Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("store: move key %s: %w", keyID, err)
		}
		n, err := projectScript.Run(ctx, s.rdb,
			[]string{meta, acctKey(accountID, "proj:"+projectID), acctKey(accountID, "pkeys:"+cur), acctKey(accountID, "pkeys:"+projectID)},
			"move", cur, projectID, keyID).Int64()
		switch {
		case err != nil:
			return fmt.Errorf("store: move key %s: %w", keyID, err)
		case n == -1:
			return fmt.Errorf("store: move key %s of %s to project %q: %w", keyID, accountID, projectID, ErrNotFound)
		case n == 1:
			return nil
		}
		// -3: moved meanwhile; read it again.
	}
	return fmt.Errorf("store: move key %s: moved concurrently too often; retry", keyID)
}

// ProjectStates returns the state of each of the account's projects ids, in
// their order, as KeyStates does for keys (ledger.KeyState.KeyID holds the
// project's id). The default project's state is not kept: the caller
// derives its spend from the account's.
func (s *Store) ProjectStates(ctx context.Context, accountID string, ids ...string) ([]ledger.KeyState, error) {
	return s.states(ctx, accountID, "ps:", ids)
}
