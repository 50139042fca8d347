package controller

// A cross-node SandboxFork (spec.nodeName is not the source's node): the checkpoint image is
// streamed from the source's agent to the target's (GET /v1/checkpoints/{id}/image into
// POST /v1/checkpoints/import; the controller holds one buffer of it at a time, never the
// image), then restored count times there, each copy resealed. docs/kubernetes.md, "What a
// cross-node fork costs".

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// CopyTimeout bounds a cross-node fork's copy of the image, export and import together.
const CopyTimeout = 15 * time.Minute

// forkElsewhere copies the image of src (checkpoint from on srcNode; "" takes a fresh one)
// to f.Spec.NodeName and restores f.Spec.Count copies there, recording them in f.Status as
// fork does. done sets the Complete condition. The image taken for the copy (when from is
// "") is removed from the source's node once the copy is over; the copy on the target is
// f.Status.CheckpointID, removed when f is deleted (removeImage).
func (r *ForkReconciler) forkElsewhere(ctx context.Context, f *zygov1.SandboxFork, src *agentsv1.Sandbox, srcNode, from string,
	done func(bool, string, string)) (ctrl.Result, error) {
	srcN, err := getNode(ctx, r.Client, srcNode)
	if err != nil {
		done(false, zygov1.ReasonNodeLost, err.Error())
		return ctrl.Result{RequeueAfter: ProbeEvery}, nil
	}
	dstN, err := getNode(ctx, r.Client, f.Spec.NodeName)
	if err != nil || !nodeReady(dstN) {
		msg := fmt.Sprintf("spec.nodeName: ZygoNode %s is not Ready; nothing was made", f.Spec.NodeName)
		if err != nil {
			msg = fmt.Sprintf("spec.nodeName: %v; nothing was made", err)
		}
		done(false, agentsv1.ReasonNoReadyNode, msg)
		return ctrl.Result{RequeueAfter: ProbeEvery}, nil
	}
	srcA, err := r.Dialer.Agent(ctx, srcN)
	if err != nil {
		done(false, zygov1.ReasonCopyFailed, err.Error())
		return ctrl.Result{RequeueAfter: ProbeEvery}, nil
	}
	dstA, err := r.Dialer.Agent(ctx, dstN)
	if err != nil {
		done(false, zygov1.ReasonCopyFailed, err.Error())
		return ctrl.Result{RequeueAfter: ProbeEvery}, nil
	}
	if err := removeLeftovers(ctx, dstA, f); err != nil {
		done(false, zygov1.ReasonForkFailed, err.Error()+"; nothing was made")
		return ctrl.Result{RequeueAfter: ProbeEvery}, nil
	}
	fresh := from == ""
	if fresh {
		cctx, cancel := context.WithTimeout(ctx, createTimeout)
		img, err := srcA.Checkpoint(cctx, src.Status.Zygo.SandboxID, "k8s-fork-"+string(f.UID))
		cancel()
		if err != nil {
			done(false, zygov1.ReasonForkFailed, fmt.Sprintf("checkpointing sandbox %s on node %s: %v", src.Status.Zygo.SandboxID, srcN.Name, err))
			return ctrl.Result{RequeueAfter: ProbeEvery}, nil
		}
		from = img.ID
		defer r.dropImage(ctx, srcA, srcN.Name, from) // only the copy on the target is used
	}
	if err := r.noteCopying(ctx, f, srcN.Name+"/"+from, fmt.Sprintf("copying image %s from node %s to node %s", from, srcN.Name, dstN.Name)); err != nil {
		return ctrl.Result{}, err
	}
	t0 := time.Now()
	imp, n, err := copyImage(ctx, srcA, dstA, from, "k8s-fork-"+string(f.UID))
	f.Status.CopiedBytes = n
	if err != nil {
		done(false, zygov1.ReasonCopyFailed, fmt.Sprintf("copying image %s from node %s to node %s (%d bytes sent): %v; nothing was made",
			from, srcN.Name, dstN.Name, n, err))
		if zygo.IsConflict(err) || zygo.IsBadRequest(err) { // an image of a sandbox with secrets, a target lacking its template
			return ctrl.Result{}, nil
		}
		return ctrl.Result{RequeueAfter: ProbeEvery}, nil
	}
	log.FromContext(ctx).Info("copied a checkpoint image between nodes", "from", f.Status.CopiedFrom, "to", dstN.Name+"/"+imp.ID,
		"bytes", n, "seconds", time.Since(t0).Seconds())
	ans := restoreCopies(ctx, dstA, imp.ID, forkCopyNames(f))
	ans.Checkpoint = imp
	f.Status.Children = forkChildren(f.Name, ans)
	f.Status.Succeeded, f.Status.Failed = int32(ans.Succeeded), int32(ans.Failed) //nolint:gosec // at most 16
	if ans.Succeeded == 0 {
		r.dropImage(ctx, dstA, dstN.Name, imp.ID)
		done(false, zygov1.ReasonForkFailed, fmt.Sprintf("restoring the copied image %s on node %s: every copy failed", imp.ID, dstN.Name))
		return ctrl.Result{RequeueAfter: ProbeEvery}, nil
	}
	f.Status.NodeName, f.Status.CheckpointID = dstN.Name, imp.ID
	done(true, zygov1.ReasonForked, fmt.Sprintf("%d of %d copies run on node %s, restored from image %s copied from %s (%d bytes in %s)",
		ans.Succeeded, f.Spec.Count, dstN.Name, imp.ID, f.Status.CopiedFrom, n, time.Since(t0).Round(time.Millisecond)))
	return ctrl.Result{}, nil
}

// noteCopying writes status.copiedFrom and Complete=False reason Copying (with msg) before
// the copy starts, so that a long copy is visible.
func (r *ForkReconciler) noteCopying(ctx context.Context, f *zygov1.SandboxFork, from, msg string) error {
	before := f.DeepCopy()
	f.Status.CopiedFrom = from
	setCondition(&f.Status.Conditions, f.Generation, zygov1.ConditionComplete, false, zygov1.ReasonCopying, msg)
	if err := r.Client.Status().Patch(ctx, f, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("writing the status: %w", err)
	}
	return nil
}

// copyImage streams checkpoint from src's agent into dst's as a new checkpoint tagged tag,
// bounded by CopyTimeout, and returns it with the bytes sent. Only one buffer of the image is
// in memory at a time. The target checks the stream's SHA-256 before the image exists.
func copyImage(ctx context.Context, src, dst Agent, checkpoint, tag string) (wire.Checkpoint, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, CopyTimeout)
	defer cancel()
	img, err := src.ExportCheckpoint(ctx, checkpoint)
	if err != nil {
		return wire.Checkpoint{}, 0, fmt.Errorf("exporting: %w", err)
	}
	defer img.Body.Close()
	cr := &countReader{r: img.Body}
	cp, err := dst.ImportCheckpoint(ctx, cr, img.Size, img.SHA256, tag)
	if err != nil {
		return cp, cr.n.Load(), fmt.Errorf("importing: %w", err)
	}
	return cp, cr.n.Load(), nil
}

// countReader counts what is read through it (the transport reads on its own goroutine).
type countReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// restoreCopies restores one copy of checkpoint per name on a in parallel (copy i named
// names[i]), each resealed by the agent, and answers as a fork would.
func restoreCopies(ctx context.Context, a Agent, checkpoint string, names []string) wire.ForkAnswer {
	ctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	kids := make([]wire.ForkChild, len(names))
	var wg sync.WaitGroup
	for i := range kids {
		wg.Go(func() {
			kids[i].Index = i
			sb, err := a.Restore(ctx, checkpoint, wire.RestoreBody{Name: names[i]})
			if err != nil {
				kids[i].Error = &wire.ErrorBody{Code: wire.CodeHTTP, Message: err.Error()}
				var ze *zygo.Error
				if errors.As(err, &ze) {
					kids[i].Error = &ze.ErrorBody
				}
				return
			}
			kids[i].Sandbox = &sb
		})
	}
	wg.Wait()
	ans := wire.ForkAnswer{Children: kids}
	for _, k := range kids {
		if k.Sandbox != nil {
			ans.Succeeded++
		} else {
			ans.Failed++
		}
	}
	return ans
}

// dropImage removes an image the fork made and no longer needs; a failure is logged (the
// image stays on the node until removed by hand: docs/kubernetes.md, known gaps).
func (r *ForkReconciler) dropImage(ctx context.Context, a Agent, node, id string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), agentCallTimeout)
	defer cancel()
	if err := a.RemoveCheckpoint(cctx, id); err != nil && !zygo.IsNotFound(err) {
		log.FromContext(ctx).Error(err, "removing a checkpoint image a fork no longer needs", "node", node, "checkpoint", id)
	}
}

// forkImageTag is the tag the daemon gives the image a fork without from takes.
const forkImageTag = "fork"

// ownImageTag returns the tag of the image f made itself and recorded in status.checkpointID:
// the image a cross-node fork copied (k8s-fork-UID), or the one a same-node fork without
// spec.checkpointRef took (the daemon's "fork"); "" when the image is not f's (a user's
// Checkpoint given by spec.checkpointRef, which its Checkpoint removes) or nothing was made.
func ownImageTag(f *zygov1.SandboxFork) string {
	switch {
	case f.Status.CheckpointID == "":
		return ""
	case f.Status.CopiedFrom != "":
		return "k8s-fork-" + string(f.UID)
	case f.Spec.CheckpointRef == nil:
		return forkImageTag
	}
	return ""
}

// removeImage removes, when f is deleted, the image f made on its node (ownImageTag): the
// one a cross-node fork copied or the one a same-node fork took. It returns wait > 0 while
// the agent refuses (the copies restored from it still exist: their Sandboxes' finalizers are
// removing them) or the node does not answer; a ZygoNode that no longer exists lets it go
// (the image is lost with its node).
func (r *ForkReconciler) removeImage(ctx context.Context, f *zygov1.SandboxFork) (time.Duration, error) {
	tag := ownImageTag(f)
	if tag == "" {
		return 0, nil
	}
	node, err := getNode(ctx, r.Client, f.Status.NodeName)
	if err != nil {
		return 0, client.IgnoreNotFound(err)
	}
	a, err := r.Dialer.Agent(ctx, node)
	if err != nil {
		return ProbeEvery, nil //nolint:nilerr // retried: the credentials may come back
	}
	cctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
	defer cancel()
	if mine, err := imageTagged(cctx, a, f.Status.CheckpointID, tag); err != nil {
		log.FromContext(ctx).Info("reading the fork's image failed; retried", "node", node.Name, "checkpoint", f.Status.CheckpointID, "err", err.Error())
		return ProbeEvery, nil
	} else if !mine {
		log.FromContext(ctx).Info("status.checkpointID names an image this SandboxFork did not make: not removing it", "node", node.Name, "checkpoint", f.Status.CheckpointID, "want_tag", tag)
		return 0, nil
	}
	err = a.RemoveCheckpoint(cctx, f.Status.CheckpointID)
	switch {
	case err == nil || zygo.IsNotFound(err):
		return 0, nil
	case zygo.IsConflict(err):
		return removeRetry, nil
	}
	log.FromContext(ctx).Info("removing the fork's image failed; retried", "node", node.Name, "checkpoint", f.Status.CheckpointID, "err", err.Error())
	return ProbeEvery, nil
}
