"""The rules' questions asked of a Store, for both roles and the tools: memory first, the API within the deadline."""
