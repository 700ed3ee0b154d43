"""Admission serving: the AdmissionReview envelope, the rules end to end, the HTTPS server, probes, TLS."""
