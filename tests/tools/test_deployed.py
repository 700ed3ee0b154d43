"""`status` goes by the keeper as deployed: its Deployment's settings, held as the keeper holds them
by keeper settings an older install left on the webhook's Deployment."""
from webhook.stores.store import StoreError
from webhook.config import KeepMode, Settings
from webhook.kinds import DEPLOYMENT
from webhook.tools.deployed import deployed_settings

NS = "kubevirt-colocate"


def deployment(container, *args, env=()):
    return {"spec": {"template": {"spec": {"containers": [
        {"name": container, "args": list(args), "env": [{"name": k, "value": v} for k, v in env]}]}}}}


class Store:
    def __init__(self, **found):
        self.found = found  # by Deployment name; an exception is raised

    async def get(self, resource, namespace, name, *, timeout=None):
        assert resource == DEPLOYMENT and namespace == NS
        found = self.found.get(name)
        if isinstance(found, Exception):
            raise found
        return found


KEEPER = deployment("keeper", "--metrics-port=8081", "--keep=migrate", "--keep-after=60")


async def test_the_keepers_deployment_gives_the_keepers_part_and_the_rest_is_as_given():
    settings, source = await deployed_settings(Store(**{"kubevirt-colocate-keeper": KEEPER}),
                                               Settings(pin="preferred"), timeout=1)
    assert (settings.keep, settings.keep_after, settings.pin) == (KeepMode.MIGRATE, 60.0, "preferred")
    assert source == f"from Deployment {NS}/kubevirt-colocate-keeper"


async def test_keeper_settings_on_the_webhooks_deployment_hold_it_in_status_too():
    store = Store(**{"kubevirt-colocate-keeper": KEEPER, "kubevirt-colocate": deployment("webhook", "--keep=report")})
    settings, source = await deployed_settings(store, Settings(), timeout=1)
    assert settings.keep is KeepMode.REPORT
    assert source.startswith(f"from Deployment {NS}/kubevirt-colocate-keeper; Deployment {NS}/kubevirt-colocate "
                             "sets the keeper's --keep=report")


async def test_a_webhooks_deployment_this_command_may_not_read_holds_nothing():
    store = Store(**{"kubevirt-colocate-keeper": KEEPER, "kubevirt-colocate": StoreError("403 forbidden")})
    settings, source = await deployed_settings(store, Settings(), timeout=1)
    assert settings.keep is KeepMode.MIGRATE and source == f"from Deployment {NS}/kubevirt-colocate-keeper"


async def test_a_paused_keeper_is_shown_paused():
    """The incident's pause (docs/operations.md, Pausing the keeper): `status` says the keeper reports, and why."""
    paused = {**KEEPER, "metadata": {"annotations": {"kubevirt-colocate/keep": "report"}}}
    settings, source = await deployed_settings(Store(**{"kubevirt-colocate-keeper": paused}), Settings(), timeout=1)
    assert settings.keep is KeepMode.REPORT
    assert source.startswith(f"from Deployment {NS}/kubevirt-colocate-keeper; Deployment {NS}/kubevirt-colocate-keeper "
                             "is annotated kubevirt-colocate/keep=report: the keeper runs report")
