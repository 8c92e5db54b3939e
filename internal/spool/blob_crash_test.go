package spool

import (
	"context"
	"strings"
	"testing"
)

// TestCrashPutBlobs kills a real process at each failpoint of PutBlobs:
// the reopened spool has no debris, counts every artifact file it holds
// exactly, and a reported put is readable; the retry retains the rest.
func TestCrashPutBlobs(t *testing.T) {
	for _, fp := range writeFailpoints("blob.artifact", true) {
		t.Run(fp, func(t *testing.T) {
			t.Parallel()
			sp := mustInit(t, Limits{})
			out := mustCrash(t, "blobs", sp.dir, fp)
			if strings.Contains(out, "blobs 3") {
				t.Fatalf("the child reported the put before its failpoint: %s", out)
			}
			sp = reopenAndInspect(t, sp.dir)
			ss, err := sp.Begin(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			before, _ := ss.Usage()
			refs, err := ss.PutBlobs([]Blob{{Data: []byte("blob one")}, {Data: []byte("blob two")}, {Data: []byte("blob three")}})
			if err != nil {
				t.Fatal(err)
			}
			after, _ := ss.Usage()
			ss.Close()
			if after.Usage.Records-before.Usage.Records > 3 || after.Usage.Records < before.Usage.Records {
				t.Fatalf("usage %+v -> %+v", before.Usage, after.Usage)
			}
			for _, r := range refs {
				if _, err := sp.ReadBlob(r); err != nil {
					t.Fatalf("after the retry %+v: %v", r, err)
				}
			}
			// A full scan agrees with the counted usage.
			sp2 := reopenAndInspect(t, sp.dir)
			ss2, err := sp2.Begin(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer ss2.Close()
			if u, _ := ss2.Usage(); u.Usage != after.Usage {
				t.Fatalf("recounted usage %+v, counted %+v", u.Usage, after.Usage)
			}
		})
	}
}
