package cli

import (
	"context"
	"fmt"
	"os"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/hookcore"
	"github.com/agentscm/agentscm/internal/hookrun"
)

// execDeliverer starts the detached deliverer as `EXE change-capture
// deliver-spool` (capture.Backgrounder), EXE being this agentscm binary.
type execDeliverer struct{ exe, configDir string }

func (d execDeliverer) StartDeliverer(lock *os.File, spoolDir string) error {
	return hookcore.StartDeliverer(d.exe, d.configDir, lock, spoolDir)
}

// kickDelivery is what status, show and the local page do after they
// observed a spool: when deliverable work waits there and no deliverer
// runs, start one (capture.ResumeDelivery), as a hook would. It never
// waits for the Hub or for the deliverer, and says nothing on success: a
// command that reads is not the place to report delivery (the deliverer's
// status is). A failure to start one is one warning line.
func kickDelivery(env *Env, store capture.StateDir, spoolDir string) {
	if spoolDir == "" || env.Executable == "" {
		return
	}
	if _, err := capture.ResumeDelivery(store, execDeliverer{env.Executable, store.Dir}, spoolDir, env.Now()); err != nil {
		fmt.Fprintf(env.Stderr, "agentscm: warning: could not resume delivery of %s: %s\n", spoolDir, oneLine(err.Error()))
	}
}

// runDeliverSpool is `change-capture deliver-spool`: the detached
// deliverer process hooks and kickDelivery start (hookrun.DeliverSpool).
func runDeliverSpool(ctx context.Context, env *Env, args []string) error {
	if code := hookrun.DeliverSpool(ctx, args, env.Stderr); code == 2 {
		return usagef("usage: %s", hookrun.DelivererUsage)
	}
	return nil
}

// kickCheckout is kickDelivery for the enabled capture binding of the
// checkout at root, if it has one, and kickUploads for its changelog.
func kickCheckout(env *Env, root string) {
	store, err := configStore(env)
	if err != nil {
		return
	}
	kickUploads(env, store.Dir, root)
	cfg, err := store.Bindings().Load()
	if err != nil {
		return
	}
	if b := cfg.Find(root); b != nil && b.Enabled {
		kickDelivery(env, store, b.Spool)
	}
}

// kickUploads starts the deliverer for the changelog of the checkout at
// root when increments wait for the Hub and no deliverer holds its upload
// lock (a deliverer was killed, its hook's kick failed): the changelog's
// half of capture.ResumeDelivery.
func kickUploads(env *Env, configDir, root string) {
	if env.Executable == "" {
		return
	}
	dir, _, ok := changelog.FindDir(configDir, root)
	if !ok {
		return
	}
	if n, err := changelog.PendingUploads(configDir, dir); err != nil || n == 0 {
		return
	}
	lock, err := changelog.TryUploadLock(dir)
	if err != nil || lock == nil {
		return
	}
	defer lock.Close()
	if err := hookcore.StartDelivererFor(env.Executable, configDir, nil, "", lock, dir); err != nil {
		fmt.Fprintf(env.Stderr, "agentscm: warning: could not resume the uploads of %s: %s\n", dir, oneLine(err.Error()))
	}
}
