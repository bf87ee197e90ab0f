package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// cacheStorageClass is the StorageClass of the chart's pluginCache in the
// test cluster, and cacheProvisioner its provisioner, startProvisioner.
const (
	cacheStorageClass = "e2e-shared"
	cacheProvisioner  = "e2e.terrarun.dev/hostpath"
)

// executorID is the user and group of executor pods: the volumes they write
// must be theirs, as on a real ReadWriteMany file system set up for them.
const executorID = 65532

// startProvisioner creates cacheStorageClass and runs, until ctx ends, a
// TEST-ONLY dynamic provisioner for it: there is no storage system on the
// test machine, so for each claim of the class it makes a directory under
// root and a hostPath PersistentVolume on it, bound to the claim, as an
// external provisioner does; kube-controller-manager's binder completes the
// binding. The three nodes share the machine's file system, so the volumes
// are ReadWriteMany in fact.
func startProvisioner(ctx context.Context, kube kubernetes.Interface, root string) error {
	class := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: cacheStorageClass},
		Provisioner:       cacheProvisioner,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimRetain),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate),
	}
	if _, err := kube.StorageV1().StorageClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating StorageClass %s: %w", cacheStorageClass, err)
	}
	factory := informers.NewSharedInformerFactory(kube, 0)
	claims := factory.Core().V1().PersistentVolumeClaims().Informer()
	provision := func(obj any) {
		pvc, ok := obj.(*corev1.PersistentVolumeClaim)
		if !ok || ptr.Deref(pvc.Spec.StorageClassName, "") != cacheStorageClass || pvc.Spec.VolumeName != "" || pvc.DeletionTimestamp != nil {
			return
		}
		if err := provisionVolume(ctx, kube, root, pvc); err != nil {
			fmt.Fprintf(os.Stderr, "e2e provisioner: claim %s/%s: %v\n", pvc.Namespace, pvc.Name, err)
		}
	}
	if _, err := claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    provision,
		UpdateFunc: func(_, obj any) { provision(obj) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	return nil
}

// provisionVolume makes the directory and the PersistentVolume of pvc.
func provisionVolume(ctx context.Context, kube kubernetes.Interface, root string, pvc *corev1.PersistentVolumeClaim) error {
	name := "pvc-" + string(pvc.UID)
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o770); err != nil {
		return err
	}
	if err := os.Chown(dir, executorID, executorID); err != nil {
		return err
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": cacheProvisioner},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: ptr.To(corev1.HostPathDirectory)}},
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              cacheStorageClass,
			VolumeMode:                    pvc.Spec.VolumeMode,
		},
	}
	if _, err := kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating PersistentVolume %s: %w", name, err)
	}
	return nil
}
