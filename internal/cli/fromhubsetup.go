package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/connections"
)

// connectForWork gives a fresh checkout root the client connection it needs
// for changelog apply --from-hub --work ID: when the user's existing
// connections name exactly one Hub repository that holds the Work, root is
// connected to it (as client setup would, with that connection's token);
// otherwise the error says the exact command to run.
func connectForWork(ctx context.Context, env *Env, root, work string) error {
	setup := fmt.Sprintf("agentscm client setup --root %s --hub URL --repository NAME --token-file PATH (or --local)", root)
	if work == "" {
		return fmt.Errorf("%s has no client connection: run %s, or pass --work ID to find the Hub among your connections", root, setup)
	}
	root, err := canonicalRoot(root)
	if err != nil {
		return err
	}
	dir, err := configDir(env)
	if err != nil {
		return err
	}
	f, err := connections.Load(dir)
	if err != nil {
		return err
	}
	type place struct{ hub, repo string }
	var found []connections.Connection
	seen := map[place]bool{}
	for _, c := range f.Connections {
		p := place{c.Hub, c.Repository}
		if seen[p] {
			continue
		}
		seen[p] = true
		cctx, cancel := context.WithTimeout(ctx, statusTimeout)
		conn, err := client.Open(cctx, c, client.Options{})
		if err == nil {
			if _, err := conn.GetWork(cctx, work); err == nil {
				found = append(found, c)
			}
			conn.Close()
		}
		cancel()
	}
	switch len(found) {
	case 0:
		return fmt.Errorf("%s has no client connection and none of your connections' Hubs holds work %s: run %s", root, work, setup)
	case 1:
	default:
		return fmt.Errorf("%s has no client connection and work %s is on several Hub repositories (%s on %s, %s on %s): run %s", root, work,
			found[0].Repository, found[0].Hub, found[1].Repository, found[1].Hub, setup)
	}
	c := found[0]
	var made connections.Connection
	if c.Kind == connections.KindHub {
		made, _, err = client.SetupHub(ctx, dir, root, c.Hub, c.Repository, c.Token, env.Now())
	} else {
		made, _, err = client.SetupLocal(ctx, dir, root, c.Repository, env.Now())
	}
	if err != nil {
		return fmt.Errorf("connect %s to repository %s on %s: %w", root, c.Repository, c.Hub, err)
	}
	fmt.Fprintf(env.Stderr, "connected %s to repository %s on %s (the Hub holding work %s; as agentscm client setup would)\n", made.Root, made.Repository, made.Hub, work)
	return nil
}

// isNoConnection reports a checkout without a client connection.
func isNoConnection(err error) bool { return errors.Is(err, connections.ErrNoConnection) }
