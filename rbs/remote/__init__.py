"""The REAPI v2 server and client: cache services, auth, proto conversions, server assembly."""
