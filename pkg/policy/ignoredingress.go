package policy

// Istio's istiod is also a Kubernetes ingress controller: with its default
// mesh config (ingressControllerMode STRICT, ingressClass "istio") it serves
// the Ingresses of class istio, by ingressClassName or by the
// kubernetes.io/ingress.class annotation, and IngressClasses name it by
// its controller. Bulwark serves none of them; these say which objects a
// user of Istio would expect served.
const (
	istioIngressClass      = "istio"
	istioIngressController = "istio.io/ingress-controller"
	ingressClassAnnotation = "kubernetes.io/ingress.class"
	ingressNotServed       = "the whole object: Bulwark is not an ingress controller (Istio's istiod serves Ingresses of class istio); route into the mesh with an Istio Gateway and VirtualService"
)

// ignoredInIngress reports an Ingress of class istio, by its
// ingressClassName or its annotation; one of another class is not Istio's
// to serve, and nothing of it is reported. An Ingress naming an
// IngressClass of Istio's controller under another name is reported
// through that IngressClass.
func ignoredInIngress(annotations map[string]string, spec map[string]any) []string {
	class, _ := spec["ingressClassName"].(string)
	if class != istioIngressClass && annotations[ingressClassAnnotation] != istioIngressClass {
		return nil
	}
	return []string{ingressNotServed}
}

// ignoredInIngressClass reports an IngressClass of Istio's controller.
func ignoredInIngressClass(_ map[string]string, spec map[string]any) []string {
	if c, _ := spec["controller"].(string); c != istioIngressController {
		return nil
	}
	return []string{ingressNotServed}
}
